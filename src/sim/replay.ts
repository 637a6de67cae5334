// Replay: drive a step stream through a policy; record, per step, what was hot or cold and what moved.
import type { Policy } from './policies/policy.ts';
import type { SimStep } from './traffic.ts';

/** Tokens per expert tile in the MoE kernels: a cold expert costs one full read per tile it serves. */
export const TILE_TOKENS = 8;

/** Per-step results; per-layer arrays are [steps * layers]. Plain typed arrays: cheap and serializable. */
export interface ReplayResult {
  readonly policy: string;
  readonly steps: number;
  readonly layers: number;
  readonly tokens: Uint32Array;
  readonly phase: Uint16Array;
  readonly picks: Uint32Array;
  readonly cold: Uint32Array;
  readonly coldPerLayer: Uint32Array;
  /** Distinct hot experts read in a layer this step. */
  readonly hotTouched: Uint16Array;
  /** Distinct cold experts read in a layer this step. */
  readonly coldTouched: Uint16Array;
  /** Cold expert tiles (ceil(tokens of the expert / TILE_TOKENS), summed) in a layer this step. */
  readonly coldTiles: Uint16Array;
  readonly swaps: Uint32Array;
  readonly copies: Uint32Array;
  readonly refused: Uint32Array;
}

/**
 * Runs every step: picks are scored against the hot set as it stands for that step (a pick is cold iff
 * its expert is not hot), then the policy moves experts before the next step. Moves are charged to the
 * step after which they happen.
 */
export function replay(policy: Policy, steps: readonly SimStep[]): ReplayResult {
  const g = policy.geometry;
  const n = steps.length;
  const L = g.layers;
  const r: ReplayResult = {
    policy: policy.name, steps: n, layers: L,
    tokens: new Uint32Array(n), phase: new Uint16Array(n), picks: new Uint32Array(n), cold: new Uint32Array(n),
    coldPerLayer: new Uint32Array(n * L), hotTouched: new Uint16Array(n * L), coldTouched: new Uint16Array(n * L),
    coldTiles: new Uint16Array(n * L), swaps: new Uint32Array(n), copies: new Uint32Array(n), refused: new Uint32Array(n),
  };
  const perExpert = new Uint32Array(L * g.experts);
  const row = L * g.topK;
  for (let s = 0; s < n; s++) {
    const step = steps[s]!;
    r.tokens[s] = step.tokens;
    r.phase[s] = step.phase;
    r.picks[s] = step.tokens * row;
    const touched: number[] = [];
    for (let t = 0; t < step.tokens; t++) {
      for (let l = 0; l < L; l++) {
        for (let k = 0; k < g.topK; k++) {
          const i = l * g.experts + step.picks[t * row + l * g.topK + k]!;
          if (perExpert[i]++ === 0) touched.push(i);
          if (!policy.hot[i]) { r.cold[s]!++; r.coldPerLayer[s * L + l]!++; }
        }
      }
    }
    for (const i of touched) {
      const l = Math.floor(i / g.experts);
      if (policy.hot[i]) r.hotTouched[s * L + l]!++;
      else { r.coldTouched[s * L + l]!++; r.coldTiles[s * L + l]! += Math.ceil(perExpert[i]! / TILE_TOKENS); }
      perExpert[i] = 0;
    }
    const m = policy.afterStep(step);
    r.swaps[s] = m.swaps;
    r.copies[s] = m.copies;
    r.refused[s] = m.refused;
  }
  return r;
}
