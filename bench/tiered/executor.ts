// What runs a step of the tiered benchmark: the GPU (cuda-executor.ts) or this CPU cost model, which
// keeps the harness testable in CI (no GPU) and gives a prediction to compare the GPU against.
import type { TieredGeometry } from './geometry.ts';
import { rowBytes } from './geometry.ts';
import type { StepPlan } from './plan.ts';
import type { RowCopy, RowMover } from './rows.ts';

export interface StepTimes {
  /** The step's MoE time (slot table + work list upload, counter, expert kernels), ms. */
  readonly stepMs: number;
  /** The pick counter's share of it, ms (0 when not counting). */
  readonly countMs: number;
}

export interface TieredExecutor extends RowMover {
  readonly name: string;
  readonly geometry: TieredGeometry;
  /** Runs one step against `slots` ([layers * experts]); counts `picks` when given. Synchronous. */
  step(slots: Int32Array, plan: StepPlan, picks: Uint16Array | null, tokens: number): StepTimes;
  close(): void;
}

/** Figures of the CPU model, from the h200-pcie profile (src/sim/cost/h200-pcie.ts). */
export const MODEL = Object.freeze({
  hbmBytesPerMs: 4.3e9,
  inPlaceBytesPerMs: 51e6,
  copyBytesPerMs: 55e6,
  launchMs: 0.004,
  countMs: 0.003,
});

/**
 * Modelled executor: hot reads at HBM rate, cold reads in place at PCIe rate, 2 launches per layer;
 * copies queue on one copy stream (host<->device at PCIe rate, device<->device at HBM rate) and complete
 * on the modelled clock, which advances by each step's time.
 */
export class CpuCostExecutor implements TieredExecutor {
  readonly name = 'cpu-model';
  private now = 0;
  private copyFreeAt = 0;
  private readonly tickets: number[] = [];
  private readonly row: number;
  private readonly C: number;

  constructor(readonly geometry: TieredGeometry) {
    this.row = rowBytes(geometry);
    this.C = geometry.experts - geometry.hotPerLayer;
  }

  private isHost(slot: number): boolean {
    return slot >= this.geometry.hotPerLayer && slot < this.geometry.hotPerLayer + this.C;
  }

  step(slots: Int32Array, plan: StepPlan, picks: Uint16Array | null): StepTimes {
    const g = this.geometry;
    let ms = 2 * g.layers * MODEL.launchMs;
    for (let l = 0; l < g.layers; l++) {
      for (let j = 0; j < plan.counts[l]!; j++) {
        const e = plan.items[(l * plan.maxItems + j) * 8]!;
        ms += this.row / (this.isHost(slots[l * g.experts + e]!) ? MODEL.inPlaceBytesPerMs : MODEL.hbmBytesPerMs);
      }
    }
    const countMs = picks ? MODEL.countMs : 0;
    ms += countMs;
    this.now += ms;
    return { stepMs: ms, countMs };
  }

  copy(copies: readonly RowCopy[]): number {
    let ms = 0;
    for (const c of copies) ms += this.row / (this.isHost(c.src) || this.isHost(c.dst) ? MODEL.copyBytesPerMs : MODEL.hbmBytesPerMs / 2);
    this.copyFreeAt = Math.max(this.copyFreeAt, this.now) + ms;
    this.tickets.push(this.copyFreeAt);
    return this.tickets.length - 1;
  }

  done(ticket: number): boolean {
    return this.tickets[ticket]! <= this.now;
  }

  close(): void {}
}
