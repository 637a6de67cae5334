// LFU/LFRU with copy on miss (like vLLM #37190): each expert's score is its pick frequency with
// exponential recency decay; a missed expert whose score beats the weakest hot expert of its layer is
// copied in, evicting that one, while the step's insert budget lasts.
import { hotMaskOf, type Moves, type PolicyFactory } from './policy.ts';

export interface LfruOptions {
  readonly insertsPerStep: number;
  /** Steps for a pick's weight to halve; Infinity = plain LFU. */
  readonly halfLifeSteps: number;
}

export function lfruPolicy(opts: LfruOptions = { insertsPerStep: 8, halfLifeSteps: 500 }, name = 'lfru'): PolicyFactory {
  return (ctx) => {
    const g = ctx.geometry;
    const hot = hotMaskOf(ctx.bootMap);
    const score = new Float64Array(g.layers * g.experts);
    const decay = Number.isFinite(opts.halfLifeSteps) ? Math.pow(0.5, 1 / opts.halfLifeSteps) : 1;
    const row = g.layers * g.topK;
    return {
      name,
      geometry: g,
      hot,
      movesPerStep: opts.insertsPerStep,
      afterStep(step): Moves {
        if (decay !== 1) for (let i = 0; i < score.length; i++) score[i]! *= decay;
        const misses: number[] = [];
        for (let t = 0; t < step.tokens; t++) {
          for (let l = 0; l < g.layers; l++) {
            for (let k = 0; k < g.topK; k++) {
              const i = l * g.experts + step.picks[t * row + l * g.topK + k]!;
              score[i]!++;
              if (!hot[i] && !misses.includes(i)) misses.push(i);
            }
          }
        }
        let copies = 0;
        const inserted = new Set<number>();
        for (const i of misses) {
          if (copies >= opts.insertsPerStep) break;
          const l = Math.floor(i / g.experts);
          let victim = -1;
          for (let e = l * g.experts; e < (l + 1) * g.experts; e++) {
            if (hot[e] && !inserted.has(e) && (victim < 0 || score[e]! < score[victim]!)) victim = e;
          }
          if (victim < 0 || score[i]! <= score[victim]!) continue;
          hot[victim] = 0;
          hot[i] = 1;
          inserted.add(i); // an expert copied in this step is not evicted by a later miss of the same step
          copies++;
        }
        return { swaps: 0, copies, refused: 0 };
      },
    };
  };
}
