// LRU with copy on miss (like llama.cpp #27861): a miss is served cold this step and the expert is
// copied into the hot bank, evicting the layer's least recently used expert, while the step's insert
// budget lasts.
import { hotMaskOf, type Moves, type PolicyFactory } from './policy.ts';

export interface LruOptions {
  /** Copies allowed per step, all layers together. */
  readonly insertsPerStep: number;
}

export function lruPolicy(opts: LruOptions = { insertsPerStep: 8 }): PolicyFactory {
  return (ctx) => {
    const g = ctx.geometry;
    const hot = hotMaskOf(ctx.bootMap);
    // Step index of last use; boot-map experts start equally old, so ties evict the lower id first.
    const lastUse = new Float64Array(g.layers * g.experts).fill(-1);
    const row = g.layers * g.topK;
    return {
      name: 'lru',
      geometry: g,
      hot,
      movesPerStep: opts.insertsPerStep,
      afterStep(step): Moves {
        const misses: number[] = [];
        for (let t = 0; t < step.tokens; t++) {
          for (let l = 0; l < g.layers; l++) {
            for (let k = 0; k < g.topK; k++) {
              const i = l * g.experts + step.picks[t * row + l * g.topK + k]!;
              if (hot[i]) lastUse[i] = step.index;
              else if (lastUse[i] !== step.index) { lastUse[i] = step.index; misses.push(i); }
            }
          }
        }
        let copies = 0;
        for (const i of misses) {
          if (copies >= opts.insertsPerStep) break;
          const l = Math.floor(i / g.experts);
          let victim = -1;
          for (let e = l * g.experts; e < (l + 1) * g.experts; e++) {
            if (hot[e] && lastUse[e] < step.index && (victim < 0 || lastUse[e]! < lastUse[victim]!)) victim = e;
          }
          if (victim < 0) continue; // every hot expert was used this step: nothing older to evict
          hot[victim] = 0;
          hot[i] = 1;
          copies++;
        }
        return { swaps: 0, copies, refused: 0 };
      },
    };
  };
}
