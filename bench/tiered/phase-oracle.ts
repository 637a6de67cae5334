// The whole-phase hindsight oracle: each phase's hot set is the top-H of that phase's true counts (known
// in advance), placed at the phase's first step, moved for free and without budget. It is the map "fitted
// in hindsight on the phase" that adaptive should converge to; the 64-step-window oracle (src/sim) is the
// stricter limit that also follows traffic inside a phase.
import { streamCounts } from '../../src/sim/fit.ts';
import type { Moves, PolicyFactory } from '../../src/sim/policies/policy.ts';

export const phaseOraclePolicy: PolicyFactory = (ctx) => {
  const g = ctx.geometry;
  const hot = new Uint8Array(g.layers * g.experts);
  const phaseEnd = (from: number): number => {
    let s = from;
    while (s < ctx.steps.length && ctx.steps[s]!.phase === ctx.steps[from]!.phase) s++;
    return s;
  };
  const place = (from: number): number => {
    const counts = streamCounts(ctx.steps, g, from, phaseEnd(from));
    let entered = 0;
    for (let l = 0; l < g.layers; l++) {
      const ids = Array.from({ length: g.experts }, (_, e) => l * g.experts + e);
      // Ties keep what is already hot, then the lower id (as the window oracle).
      ids.sort((a, b) => (counts[b]! - counts[a]!) || (hot[b]! - hot[a]!) || a - b);
      ids.forEach((i, rank) => {
        const want = rank < g.hotPerLayer ? 1 : 0;
        if (want && !hot[i]) entered++;
        hot[i] = want;
      });
    }
    return entered;
  };
  if (ctx.steps.length > 0) place(0);
  return {
    name: 'oracle-phase',
    geometry: g,
    hot,
    movesPerStep: Infinity,
    afterStep(step): Moves {
      const next = step.index + 1;
      if (next >= ctx.steps.length || ctx.steps[next]!.phase === step.phase) return { swaps: 0, copies: 0, refused: 0 };
      return { swaps: place(next), copies: 0, refused: 0 };
    },
  };
};
