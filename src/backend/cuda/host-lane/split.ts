// How the host expert lane splits a layer's cold experts with the GPU: of c distinct cold experts at a decode step the
// host computes take[c] parts (from DRAM at the host's speed; an expert counts `parts` parts: whole experts, and of
// one more expert the first take[c] % parts parts of its units and features) while the GPU reads the rest in place over
// the bus, and the layer waits for the slower side. Which split is fastest moves with the machine (the host's speed
// drifts between runs) and with contention (the GPU's in-place reads take DRAM bandwidth
// from the host's threads), so no model of the two sides is trusted: op_host_collect times every layer's cold phase
// (routing to answer) by its cell (c, h), every HOST_EXPLORE-th layer tries a neighbour of take[c] (one part more or
// fewer on the host), and each update moves take[c] to whichever of take[c] - 1, take[c], take[c] + 1 measured
// fastest, by more than the noise (a layer's time spreads with its experts and the host): a table moved by
// noise walks from split to split and loses to a fixed share. The split only moves work between the sides: every unit
// and feature has the same bits wherever it is computed.
import { ResidencyError } from '../../../errors.ts';

/**
 * Cell (c, h)'s layers, summed nanoseconds and summed (ns / 1024)^2 (their spread), row-major over c = 0..maxPicks,
 * h = 0..MAX_PARTS x maxPicks.
 */
export interface SplitCells {
  readonly n: Float64Array;
  readonly ns: Float64Array;
  readonly sq: Float64Array;
}

/** Each update keeps this much of what was measured before it (64-step updates: a half-life of 154 steps). */
const KEEP = 0.75;
/** Decayed layers a cell needs before its mean is compared (its spread Bessel-corrected: few layers, a wide margin). */
export const MIN_LAYERS = 4;
/** A neighbour must beat the current choice by this much (relative) to take its place... */
export const MIN_GAIN = 0.02;
/** ...and by this many standard errors of the difference of the two means: noise does not move the table. */
export const MIN_Z = 2.5;

/** The most parts an expert counts (host_exchange.cuh HOST_PARTS): the cells' h runs to MAX_PARTS x maxPicks. */
export const MAX_PARTS = 4;

/** parts (an expert's in the split) if an integer in 1..MAX_PARTS, else refused by name. */
export function checkParts(parts: number): number {
  if (!Number.isInteger(parts) || parts < 1 || parts > MAX_PARTS) throw new ResidencyError('BAD_ARGUMENT', `--host-expert-parts: expected an integer in 1..${MAX_PARTS}, got ${parts}`);
  return parts;
}

/** take[c] = ceil(share c parts) parts: a fixed share (--host-expert-share), and the measured split's start. */
export function fixedTakes(share: number, maxPicks: number, parts = 1): Int32Array {
  if (!(share > 0 && share <= 1)) throw new ResidencyError('BAD_ARGUMENT', `host experts: share must be in (0, 1], got ${share}`);
  return Int32Array.from({ length: maxPicks + 1 }, (_, c) => Math.min(c * parts, Math.ceil(c * parts * share - 1e-9)));
}

/** The split's start: of c cold experts the host takes ceil(0.6 c), the best fixed share measured (docs/results.md). */
export const START_SHARE = 0.6;

export interface SplitReport {
  /** 'measured': take[] follows the measured cells; 'fixed': a share given. */
  readonly mode: 'measured' | 'fixed';
  /** Parts an expert counts; take[c] is in parts. */
  readonly parts: number;
  readonly take: readonly number[];
  /** Mean cold phase of a layer (us) at take[c], by c (null: not measured). */
  readonly layerUs: readonly (number | null)[];
  /** Layers posted to the host so far and the GPU's mean wait for their answers (us), as counted at the updates (every
   * SPLIT_UPDATE_STEPS steps, one update behind); a wait that timed out is not among them. */
  readonly hostLayers: number;
  readonly meanWaitUs: number;
  /** Layers with a split expert and the GPU's mean wait for the host's units of it (us), counted as hostLayers. */
  readonly splitLayers: number;
  readonly meanUnitsWaitUs: number;
  /** Updates that moved the table. */
  readonly moves: number;
}

/** The split's state: decayed cell times and the table they give. */
export class HostSplit {
  private readonly acc: SplitCells;
  private takes: Int32Array;
  private readonly waited = { n: 0, ns: 0 };
  private readonly unitsWaited = { n: 0, ns: 0 };
  private moves = 0;

  /** parts: an expert's (1..MAX_PARTS); share: a fixed share (the table never moves); absent: measured, from START_SHARE. */
  constructor(private readonly maxPicks: number, private readonly parts = 1, private readonly share?: number) {
    checkParts(parts);
    const cells = (maxPicks + 1) * (MAX_PARTS * maxPicks + 1);
    this.acc = { n: new Float64Array(cells), ns: new Float64Array(cells), sq: new Float64Array(cells) };
    this.takes = fixedTakes(share ?? START_SHARE, maxPicks, parts);
  }

  get measured(): boolean {
    return this.share === undefined;
  }

  table(): Int32Array {
    return this.takes;
  }

  /**
   * Cell (c, h)'s mean (us) and its mean's variance (us^2), once it has MIN_LAYERS layers. The GPU sums q^2 for
   * q = floor(ns / 1024): with x = ns / 1024 and its fraction uniform, E[x^2] = E[q^2] + E[x] - 1/6 (truncation alone
   * would understate a 300 us layer's spread by ~300 us^2, a 6% spread's whole).
   */
  private stat(c: number, h: number): { us: number; v: number } | null {
    const i = c * (MAX_PARTS * this.maxPicks + 1) + h;
    const n = this.acc.n[i]!;
    if (n < MIN_LAYERS) return null;
    const x = this.acc.ns[i]! / n / 1024;
    const spread = Math.max(0, this.acc.sq[i]! / n + x - 1 / 6 - x * x) * 1.024 ** 2 * (n / (n - 1));
    return { us: x * 1.024, v: spread / n };
  }

  private mean(c: number, h: number): number | null {
    return this.stat(c, h)?.us ?? null;
  }

  /**
   * What was measured since the last update: the cells' layers, times and spread, the GPU's waits for the answers and
   * for the host's units of split experts (layers, ns). Decays the older measurements and (measured) moves each take[c]
   * to its fastest measured neighbour, where it is faster by MIN_GAIN and by MIN_Z standard errors. Returns whether the
   * table changed.
   */
  update(cells: SplitCells, wait: { n: number; ns: number }, unitsWait = { n: 0, ns: 0 }): boolean {
    for (let i = 0; i < this.acc.n.length; i++) {
      this.acc.n[i] = KEEP * this.acc.n[i]! + cells.n[i]!;
      this.acc.ns[i] = KEEP * this.acc.ns[i]! + cells.ns[i]!;
      this.acc.sq[i] = KEEP * this.acc.sq[i]! + cells.sq[i]!;
    }
    this.waited.n += wait.n;
    this.waited.ns += wait.ns;
    this.unitsWaited.n += unitsWait.n;
    this.unitsWaited.ns += unitsWait.ns;
    if (!this.measured) return false;
    let changed = false;
    for (let c = 1; c <= this.maxPicks; c++) {
      const t = this.takes[c]!;
      const here = this.stat(c, t);
      if (here === null) continue;
      let best = t, bestUs = here.us * (1 - MIN_GAIN);
      for (const h of [t - 1, t + 1]) {
        if (h < 0 || h > c * this.parts) continue;
        const s = this.stat(c, h);
        if (s !== null && s.us < bestUs && here.us - s.us > MIN_Z * Math.sqrt(here.v + s.v)) { best = h; bestUs = s.us; }
      }
      if (best !== t) { this.takes[c] = best; changed = true; }
    }
    if (changed) this.moves++;
    return changed;
  }

  report(): SplitReport {
    return {
      mode: this.measured ? 'measured' : 'fixed', parts: this.parts, take: Array.from(this.takes),
      layerUs: Array.from(this.takes, (h, c) => (c === 0 ? null : this.mean(c, h))),
      hostLayers: this.waited.n, meanWaitUs: this.waited.n ? this.waited.ns / this.waited.n / 1e3 : 0,
      splitLayers: this.unitsWaited.n, meanUnitsWaitUs: this.unitsWaited.n ? this.unitsWaited.ns / this.unitsWaited.n / 1e3 : 0, moves: this.moves,
    };
  }
}

/** The split in a line (logs): the table for 1-8 cold experts (in experts), a layer's time there, the table's moves, the GPU's waits. */
export function splitText(r: SplitReport): string {
  const us = r.layerUs.slice(1, 9).map((u) => (u === null ? '-' : u.toFixed(0))).join(' ');
  const experts = r.take.slice(1, 9).map((t) => +(t / r.parts).toFixed(2)).join(' ');
  return `split (${r.mode}, ${r.parts} part${r.parts === 1 ? '' : 's'} an expert) of 1-8 cold experts ${experts} to the host (a layer's cold phase there ${us} us; ` +
    `${r.moves} table moves), the GPU waited ${r.meanWaitUs.toFixed(1)} us a host layer` +
    (r.splitLayers ? `, ${r.meanUnitsWaitUs.toFixed(1)} us for the host's units at ${r.splitLayers} split layers` : '');
}
