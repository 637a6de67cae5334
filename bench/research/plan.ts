// One step's work for the expert kernels: per layer, the distinct picked experts with their tokens (the
// kernels read each expert row once per step however many tokens picked it), in the kernels' layout.
import type { SimStep } from '../../src/sim/traffic.ts';
import type { TieredGeometry } from './geometry.ts';

/** Ints per work item: expert, ntok, tok[MAXT], pad (kernels/tiered.cu ITEM_INTS). */
export const ITEM_INTS = 8;
/** Most tokens one work item carries (kernels/tiered.cu MAXT): the batch at most. */
export const MAXT = 4;

export interface StepPlan {
  /** [layers][maxItems][ITEM_INTS], only the first counts[l] items of a layer used. */
  readonly items: Int32Array;
  readonly counts: Int32Array;
  readonly maxItems: number;
}

export function newPlan(g: TieredGeometry, users: number): StepPlan {
  const maxItems = users * g.topK;
  return { items: new Int32Array(g.layers * maxItems * ITEM_INTS), counts: new Int32Array(g.layers), maxItems };
}

/** Fills `plan` from the step's picks ([tokens][layers][topK]). */
export function planStep(step: SimStep, g: TieredGeometry, plan: StepPlan): StepPlan {
  if (step.tokens > MAXT) throw new Error(`tiered: ${step.tokens} tokens in a step, the kernels take at most ${MAXT}`);
  plan.counts.fill(0);
  const row = g.layers * g.topK;
  for (let l = 0; l < g.layers; l++) {
    const base = l * plan.maxItems;
    for (let t = 0; t < step.tokens; t++) {
      for (let k = 0; k < g.topK; k++) {
        const e = step.picks[t * row + l * g.topK + k]!;
        let j = 0;
        while (j < plan.counts[l]! && plan.items[(base + j) * ITEM_INTS] !== e) j++;
        const o = (base + j) * ITEM_INTS;
        if (j === plan.counts[l]) {
          plan.items[o] = e;
          plan.items[o + 1] = 0;
          plan.counts[l]!++;
        }
        plan.items[o + 2 + plan.items[o + 1]!] = t;
        plan.items[o + 1]!++;
      }
    }
  }
  return plan;
}
