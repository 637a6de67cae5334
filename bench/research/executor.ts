// What runs a step of the tiered benchmark: the GPU (cuda-executor.ts) or this CPU cost model, which
// keeps the harness testable in CI (no GPU) and gives a prediction to compare the GPU against.
import type { TieredGeometry } from './geometry.ts';
import { hostRowsPerLayer, rowBytes } from './geometry.ts';
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

export interface CostModel {
  readonly hbmBytesPerMs: number;
  readonly inPlaceBytesPerMs: number;
  /** Host<->device row copies on the copy stream, as they progress while steps run. */
  readonly copyBytesPerMs: number;
  readonly launchMs: number;
  readonly countMs: number;
}

/**
 * Figures of the CPU model: the h200-pcie profile (src/sim/cost/h200-pcie.ts), with two rates calibrated on
 * the H200 runs of 2026-11-30 (calibrate.ts): expert rows read from HBM at 2.6 TB/s (the all-hot step, 96
 * rows in 0.70 ms; the profile's 4.3 TB/s is the copy rate), and exchange copies at 28 GB/s while steps
 * run (the profile's 55 GB/s made a budget set that saturates the exchange pipeline look 1.2 pp of cold
 * share better than the GPU measured; unsaturated runs match at any rate).
 */
export const MODEL: CostModel = Object.freeze({
  hbmBytesPerMs: 2.6e9,
  inPlaceBytesPerMs: 51e6,
  copyBytesPerMs: 28e6,
  launchMs: 0.004,
  countMs: 0.003,
});

/**
 * Modelled executor: hot reads at HBM rate, cold reads in place at PCIe rate, 2 launches per layer;
 * copies queue on one copy stream (host<->device at PCIe rate, device<->device at HBM rate) and complete
 * on the modelled clock, which advances by each step's time. Either direction of a host copy costs the
 * same (copyBytesPerMs): a mirror move's one host->device copy costs what an exchange's host->HBM copy does.
 */
export class CpuCostExecutor implements TieredExecutor {
  readonly name = 'cpu-model';
  private now = 0;
  private copyFreeAt = 0;
  private readonly tickets: number[] = [];
  private readonly row: number;
  private readonly C: number;

  constructor(readonly geometry: TieredGeometry, private readonly model: CostModel = MODEL) {
    this.row = rowBytes(geometry);
    // Host bank rows per layer: the cold rows, or every expert's mirror row (geometry.moves 'mirror').
    this.C = hostRowsPerLayer(geometry);
  }

  private isHost(slot: number): boolean {
    return slot >= this.geometry.hotPerLayer && slot < this.geometry.hotPerLayer + this.C;
  }

  step(slots: Int32Array, plan: StepPlan, picks: Uint16Array | null): StepTimes {
    const g = this.geometry;
    let ms = 2 * g.layers * this.model.launchMs;
    for (let l = 0; l < g.layers; l++) {
      for (let j = 0; j < plan.counts[l]!; j++) {
        const e = plan.items[(l * plan.maxItems + j) * 8]!;
        ms += this.row / (this.isHost(slots[l * g.experts + e]!) ? this.model.inPlaceBytesPerMs : this.model.hbmBytesPerMs);
      }
    }
    const countMs = picks ? this.model.countMs : 0;
    ms += countMs;
    this.now += ms;
    return { stepMs: ms, countMs };
  }

  copy(copies: readonly RowCopy[]): number {
    let ms = 0;
    for (const c of copies) ms += this.row / (this.isHost(c.src) || this.isHost(c.dst) ? this.model.copyBytesPerMs : this.model.hbmBytesPerMs / 2);
    this.copyFreeAt = Math.max(this.copyFreeAt, this.now) + ms;
    this.tickets.push(this.copyFreeAt);
    return this.tickets.length - 1;
  }

  done(ticket: number): boolean {
    return this.tickets[ticket]! <= this.now;
  }

  close(): void {}
}
