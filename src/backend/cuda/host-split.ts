// How the host expert lane splits a layer's cold experts with the GPU: of c distinct cold experts at a decode step the
// host computes take[c] (from DRAM at the host's speed) while the GPU reads the other c - take[c] in place over the
// bus, and the layer waits for the slower side. Which split is fastest moves with the machine (the host's speed
// drifted 10-20% between runs on the H200's host) and with contention (the GPU's in-place reads take DRAM bandwidth
// from the host's threads), so no model of the two sides is trusted: op_host_collect times every layer's cold phase
// (routing to answer) by its cell (c, h), every HOST_EXPLORE-th layer tries a neighbour of take[c] (one more or one
// fewer on the host), and each update moves take[c] to whichever of take[c] - 1, take[c], take[c] + 1 measured
// fastest. The split only moves work between the sides: every pick has the same bits wherever it is computed.
import { ResidencyError } from '../../errors.ts';

/** Cell (c, h)'s layers and summed nanoseconds, row-major over c = 0..maxPicks, h = 0..maxPicks. */
export interface SplitCells {
  readonly n: Float64Array;
  readonly ns: Float64Array;
}

/** Each update keeps this much of what was measured before it (64-step updates: a half-life of 64 steps). */
const KEEP = 0.5;
/** Decayed layers a cell needs before its mean is compared. */
export const MIN_LAYERS = 4;
/** A neighbour must beat the current choice by this much (relative) to take its place: noise does not move the table. */
export const MIN_GAIN = 0.02;

/** take[c] = ceil(share c): a fixed share (--host-expert-share), and the measured split's start at 0.6. */
export function fixedTakes(share: number, maxPicks: number): Int32Array {
  if (!(share > 0 && share <= 1)) throw new ResidencyError('BAD_ARGUMENT', `host experts: share must be in (0, 1], got ${share}`);
  return Int32Array.from({ length: maxPicks + 1 }, (_, c) => Math.min(c, Math.ceil(c * share - 1e-9)));
}

/**
 * The split's start: of c cold experts the host takes ceil(0.6 c) (H200 host, 14 threads, 16 layers at 64 of 128 hot,
 * the fixed map at batch 1: 0.6 gave 4.77-5.81 ms a step, 0.5 5.33-5.78, 0.7 6.36-7.05, no lane 9.45;
 * bench/tiered/results/host-lane-2026-12-02.md).
 */
export const START_SHARE = 0.6;

export interface SplitReport {
  /** 'measured': take[] follows the measured cells; 'fixed': a share given. */
  readonly mode: 'measured' | 'fixed';
  readonly take: readonly number[];
  /** Mean cold phase of a layer (us) at take[c], by c (null: not measured). */
  readonly layerUs: readonly (number | null)[];
  /** Layers posted to the host so far and the GPU's mean wait for their answers (us), as counted at the updates (every
   * SPLIT_UPDATE_STEPS steps, one update behind); a wait that timed out is not among them. */
  readonly hostLayers: number;
  readonly meanWaitUs: number;
  /** Updates that moved the table. */
  readonly moves: number;
}

/** The split's state: decayed cell times and the table they give. */
export class HostSplit {
  private readonly acc: SplitCells;
  private takes: Int32Array;
  private readonly waited = { n: 0, ns: 0 };
  private moves = 0;

  /** share: a fixed share (the table never moves); absent: measured, from START_SHARE. */
  constructor(private readonly maxPicks: number, private readonly share?: number) {
    const cells = (maxPicks + 1) ** 2;
    this.acc = { n: new Float64Array(cells), ns: new Float64Array(cells) };
    this.takes = fixedTakes(share ?? START_SHARE, maxPicks);
  }

  get measured(): boolean {
    return this.share === undefined;
  }

  table(): Int32Array {
    return this.takes;
  }

  private mean(c: number, h: number): number | null {
    const i = c * (this.maxPicks + 1) + h;
    return this.acc.n[i]! >= MIN_LAYERS ? this.acc.ns[i]! / this.acc.n[i]! / 1e3 : null;
  }

  /**
   * What was measured since the last update: the cells' layers and times, the GPU's waits (layers, ns; summed over h).
   * Decays the older measurements and (measured) moves each take[c] to its fastest measured neighbour. Returns whether
   * the table changed.
   */
  update(cells: SplitCells, wait: { n: number; ns: number }): boolean {
    for (let i = 0; i < this.acc.n.length; i++) {
      this.acc.n[i] = KEEP * this.acc.n[i]! + cells.n[i]!;
      this.acc.ns[i] = KEEP * this.acc.ns[i]! + cells.ns[i]!;
    }
    this.waited.n += wait.n;
    this.waited.ns += wait.ns;
    if (!this.measured) return false;
    let changed = false;
    for (let c = 1; c <= this.maxPicks; c++) {
      const t = this.takes[c]!;
      const here = this.mean(c, t);
      if (here === null) continue;
      let best = t, bestUs = here * (1 - MIN_GAIN);
      for (const h of [t - 1, t + 1]) {
        if (h < 0 || h > c) continue;
        const us = this.mean(c, h);
        if (us !== null && us < bestUs) { best = h; bestUs = us; }
      }
      if (best !== t) { this.takes[c] = best; changed = true; }
    }
    if (changed) this.moves++;
    return changed;
  }

  report(): SplitReport {
    return {
      mode: this.measured ? 'measured' : 'fixed', take: Array.from(this.takes),
      layerUs: Array.from(this.takes, (h, c) => (c === 0 ? null : this.mean(c, h))),
      hostLayers: this.waited.n, meanWaitUs: this.waited.n ? this.waited.ns / this.waited.n / 1e3 : 0, moves: this.moves,
    };
  }
}

/** The split in a line (logs): the table for 1-8 cold experts, a layer's time there, the table's moves, the GPU's wait. */
export function splitText(r: SplitReport): string {
  const us = r.layerUs.slice(1, 9).map((u) => (u === null ? '-' : u.toFixed(0))).join(' ');
  return `split (${r.mode}) of 1-8 cold experts ${r.take.slice(1, 9).join(' ')} to the host (a layer's cold phase there ${us} us; ` +
    `${r.moves} table moves), the GPU waited ${r.meanWaitUs.toFixed(1)} us a host layer`;
}
