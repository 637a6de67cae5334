// Seed: a map fitted from a counts dump (top-H per layer), then frozen. Where you start, without adaptation.
import { ResidencyError } from '../../errors.ts';
import { NO_MOVES, hotMaskOf, type PolicyFactory } from './policy.ts';
import type { RowMap } from '../../residency/rowmap.ts';

/** The seed policy needs the fitted map; the harness fits it (src/sim/fit.ts) from the traffic it names. */
export function seedPolicy(seedMap: RowMap | undefined): PolicyFactory {
  return (ctx) => {
    if (!seedMap) throw new ResidencyError('BAD_ARGUMENT', 'policy seed needs a fitted map: pass --seed-from DOMAINS (or --map MAP.json)');
    return { name: 'seed', geometry: ctx.geometry, hot: hotMaskOf(seedMap), movesPerStep: 0, afterStep: () => NO_MOVES };
  };
}
