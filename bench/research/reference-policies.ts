// Reference policies the policy-research benchmarks (noise.ts, prior.ts) score adaptive against.
import { hotMaskOf, type Moves, type PolicyFactory } from '../../src/sim/policies/policy.ts';
import { fitOn } from '../../src/sim/setup.ts';
import type { TraceSet } from '../../src/sim/traces/trace.ts';
import { parsePhases, type SimStep } from '../../src/sim/traffic.ts';

/**
 * domain-fit: per phase, the top-H map of the phase's domains fitted on their whole traces in `set` (the
 * scored traffic's documents), placed free at the phase start: the reachable hindsight reference.
 */
export function domainFitPolicy(set: TraceSet, phases: string): PolicyFactory {
  return (ctx) => {
    const maps = parsePhases(phases, set).map((ph) => hotMaskOf(fitOn(set, ctx.geometry, ph.domains, 'domain-fit')));
    const hot = Uint8Array.from(maps[0]!);
    return {
      name: 'domain-fit', geometry: ctx.geometry, hot, movesPerStep: Infinity,
      afterStep(step: SimStep): Moves {
        const next = ctx.steps[step.index + 1];
        if (!next || next.phase === step.phase) return { swaps: 0, copies: 0, refused: 0 };
        let entered = 0;
        maps[next.phase]!.forEach((v, i) => { if (v && !hot[i]) entered++; hot[i] = v; });
        return { swaps: entered, copies: 0, refused: 0 };
      },
    };
  };
}
