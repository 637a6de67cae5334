// Cost models: turn a replay's per-step, per-layer reads and moves into modelled step times.
//
// Scaling from the fixture (6 layers x 64 experts, top-6) to the target geometry (DeepSeek-V4.1-Flash-like,
// design.md section 2: 40 MoE layers x 384 experts, top-6, 17.93 MiB per MXFP4 expert): both route six
// experts per token per layer, so we keep the fixture's per-layer pattern of hot/cold reads (its cold share,
// its distinct experts touched, its tiles) and let each fixture layer stand for target.layers / 6 target
// layers (layerScale). Moves scale the same way (a fixture swap stands for layerScale target swaps).
// Caveat: with 64 experts instead of 384, tokens of different users collide on the same expert more often,
// so at 4+ users the fixture overstates sharing (fewer distinct experts read) and the model is optimistic.
import type { ReplayResult } from '../replay.ts';

export const MiB = 1024 * 1024;

export interface TargetGeometry {
  readonly layers: number;
  readonly experts: number;
  readonly expertBytes: number;
}

export const V4_FLASH: TargetGeometry = Object.freeze({ layers: 40, experts: 384, expertBytes: 17.93 * MiB });

/** One step's MoE work in one fixture layer, as the cost model sees it. */
export interface LayerWork {
  readonly hotTouched: number;
  readonly coldTouched: number;
  readonly coldTiles: number;
}

export interface CostProfile {
  readonly name: string;
  /** One paragraph: the hardware, the figures used and where they come from. */
  readonly description: string;
  readonly target: TargetGeometry;
  /** Non-MoE time of a step (attention, dense layers, launches), microseconds. */
  readonly baseStepUs: number;
  /** MoE time of one target layer doing `w`, microseconds (the profile decides serial vs overlapped). */
  layerUs(w: LayerWork): number;
  /** Cost of one hot<->cold swap (one target layer), microseconds, when modelled per swap. */
  readonly swapUs: number;
  /** Cost of one copy-on-miss insert, microseconds. */
  readonly copyUs: number;
  /**
   * When set, a step that applies swaps takes max(own time, factor x p95 of swap-free steps) instead of
   * adding swapUs per swap (the factor the GB300 profile uses is a measurement: docs/results.md, "Cost model inputs").
   */
  readonly swapStepFactor?: number;
}

/** Modelled time of every step of a replay, microseconds. */
export function stepTimesUs(r: ReplayResult, p: CostProfile): Float64Array {
  const scale = p.target.layers / r.layers;
  const out = new Float64Array(r.steps);
  for (let s = 0; s < r.steps; s++) {
    let moe = 0;
    for (let l = 0; l < r.layers; l++) {
      const i = s * r.layers + l;
      moe += p.layerUs({ hotTouched: r.hotTouched[i]!, coldTouched: r.coldTouched[i]!, coldTiles: r.coldTiles[i]! });
    }
    out[s] = p.baseStepUs + moe * scale + r.copies[s]! * scale * p.copyUs;
    if (p.swapStepFactor === undefined) out[s]! += r.swaps[s]! * scale * p.swapUs;
  }
  if (p.swapStepFactor !== undefined) {
    const free = Array.from(out).filter((_, s) => r.swaps[s] === 0).sort((a, b) => a - b);
    const p95 = free.length ? free[Math.min(free.length - 1, Math.floor(free.length * 0.95))]! : 0;
    for (let s = 0; s < r.steps; s++) if (r.swaps[s]! > 0) out[s] = Math.max(out[s]!, p.swapStepFactor * p95);
  }
  return out;
}
