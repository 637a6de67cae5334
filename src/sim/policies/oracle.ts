// Hindsight oracle: each window's hot set is the top-H of that window's true counts, moved for free and
// without budget. Not a policy anyone can run; it is the limit the others are measured against.
import { streamCounts } from '../fit.ts';
import type { Moves, PolicyFactory } from './policy.ts';

export function oraclePolicy(windowSteps = 64): PolicyFactory {
  return (ctx) => {
    const g = ctx.geometry;
    const hot = new Uint8Array(g.layers * g.experts);
    const place = (from: number): number => {
      const counts = streamCounts(ctx.steps, g, from, Math.min(from + windowSteps, ctx.steps.length));
      let entered = 0;
      for (let l = 0; l < g.layers; l++) {
        const ids = Array.from({ length: g.experts }, (_, e) => l * g.experts + e);
        // Ties keep what is already hot (no pointless moves), then the lower id.
        ids.sort((a, b) => (counts[b]! - counts[a]!) || (hot[b]! - hot[a]!) || a - b);
        ids.forEach((i, rank) => {
          const want = rank < g.hotPerLayer ? 1 : 0;
          if (want && !hot[i]) entered++;
          hot[i] = want;
        });
      }
      return entered;
    };
    place(0);
    return {
      name: 'oracle',
      geometry: g,
      hot,
      movesPerStep: Infinity,
      afterStep(step): Moves {
        const next = step.index + 1;
        if (next % windowSteps !== 0 || next >= ctx.steps.length) return { swaps: 0, copies: 0, refused: 0 };
        return { swaps: place(next), copies: 0, refused: 0 };
      },
    };
  };
}
