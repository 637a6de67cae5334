// Hindsight oracles: each window's hot set is the top-H of that window's true counts, moved for free and
// without budget. Not policies anyone can run; they are the limits the others are measured against.
// - window N steps ('oracle'): also follows the traffic inside a phase, fitting each window's noise;
// - window 'phase' ('oracle-phase'): the map fitted in hindsight on each whole phase, which an adaptive
//   policy should converge to.
import { streamCounts } from '../fit.ts';
import type { Moves, PolicyFactory } from './policy.ts';

export function oraclePolicy(window: number | 'phase' = 64): PolicyFactory {
  return (ctx) => {
    const g = ctx.geometry;
    const hot = new Uint8Array(g.layers * g.experts);
    const windowEnd = (from: number): number => {
      if (window !== 'phase') return Math.min(from + window, ctx.steps.length);
      let s = from;
      while (s < ctx.steps.length && ctx.steps[s]!.phase === ctx.steps[from]!.phase) s++;
      return s;
    };
    const startsWindow = (next: number): boolean =>
      window === 'phase' ? ctx.steps[next]!.phase !== ctx.steps[next - 1]!.phase : next % window === 0;
    const place = (from: number): number => {
      const counts = streamCounts(ctx.steps, g, from, windowEnd(from));
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
    if (ctx.steps.length > 0) place(0);
    return {
      name: window === 'phase' ? 'oracle-phase' : 'oracle',
      geometry: g,
      hot,
      movesPerStep: Infinity,
      afterStep(step): Moves {
        const next = step.index + 1;
        if (next >= ctx.steps.length || !startsWindow(next)) return { swaps: 0, copies: 0, refused: 0 };
        return { swaps: place(next), copies: 0, refused: 0 };
      },
    };
  };
}
