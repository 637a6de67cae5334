// Metrics over a replay: cold share by window, layer and phase; peak and T90 after each shift; moves.
import type { ReplayResult } from './replay.ts';

export interface MetricOptions {
  /** Steps per reported window (the timeline and the per-phase median). */
  readonly windowSteps: number;
  /** Fraction of each phase skipped before the converged median is taken. */
  readonly warmupFraction: number;
  /** Width of the centred moving window used to find the peak and the T90 crossing. */
  readonly smoothSteps: number;
}

export const DEFAULT_METRICS: MetricOptions = Object.freeze({ windowSteps: 64, warmupFraction: 0.5, smoothSteps: 256 });

export interface PhaseMetrics {
  readonly phase: number;
  readonly firstStep: number;
  readonly steps: number;
  readonly tokens: number;
  /** Cold share over the whole phase. */
  readonly coldShare: number;
  /** Median window cold share after the warm-up: where the policy settles. */
  readonly converged: number;
  /** Highest smoothed cold share in the first half of the phase (after a shift). */
  readonly peak: number;
  /**
   * Steps from the phase start until the smoothed cold share first falls to settled + 10% of (peak - settled),
   * settled being the median of the same smoothed series after the warm-up (not `converged`: with cold picks in
   * bursts, at document changes, most 64-step windows sit far below the smoothed level and the crossing never
   * came); null if never, and for the first phase (no shift precedes it).
   */
  readonly t90Steps: number | null;
  readonly coldShareByLayer: readonly number[];
  readonly swaps: number;
  readonly copies: number;
  readonly refused: number;
}

/** Cold share of consecutive windows of `w` steps (the last one may be shorter). */
export function windowColdShare(r: ReplayResult, w: number, from = 0, to = r.steps): number[] {
  const out: number[] = [];
  for (let s = from; s < to; s += w) {
    let c = 0;
    let p = 0;
    for (let i = s; i < Math.min(s + w, to); i++) { c += r.cold[i]!; p += r.picks[i]!; }
    out.push(p > 0 ? c / p : 0);
  }
  return out;
}

/** Cold share in a window of `w` steps centred on each step of [from, to) (clipped to the range). */
export function smoothedColdShare(r: ReplayResult, w: number, from: number, to: number): Float64Array {
  const c = new Float64Array(to - from + 1);
  const p = new Float64Array(to - from + 1);
  for (let s = from; s < to; s++) { c[s - from + 1] = c[s - from]! + r.cold[s]!; p[s - from + 1] = p[s - from]! + r.picks[s]!; }
  const out = new Float64Array(to - from);
  for (let s = 0; s < to - from; s++) {
    const a = Math.max(0, s - (w >> 1));
    const b = Math.min(to - from, s + (w >> 1));
    const pp = p[b]! - p[a]!;
    out[s] = pp > 0 ? (c[b]! - c[a]!) / pp : 0;
  }
  return out;
}

function median(xs: number[]): number {
  if (xs.length === 0) return 0;
  const a = xs.slice().sort((x, y) => x - y);
  const m = a.length >> 1;
  return a.length % 2 ? a[m]! : (a[m - 1]! + a[m]!) / 2;
}

/** Phases as [first, end) step ranges, read from the replay's phase column. */
export function phaseRanges(r: ReplayResult): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let s = 0; s < r.steps; s++) {
    if (s === 0 || r.phase[s] !== r.phase[s - 1]) out.push([s, s + 1]);
    else out[out.length - 1]![1] = s + 1;
  }
  return out;
}

export function phaseMetrics(r: ReplayResult, o: MetricOptions = DEFAULT_METRICS): PhaseMetrics[] {
  return phaseRanges(r).map(([a, b], phase) => {
    const sum = (x: Uint32Array) => { let n = 0; for (let s = a; s < b; s++) n += x[s]!; return n; };
    const warm = a + Math.floor((b - a) * o.warmupFraction);
    const converged = median(windowColdShare(r, o.windowSteps, warm, b));
    const smooth = smoothedColdShare(r, o.smoothSteps, a, b);
    const half = Math.max(1, Math.floor((b - a) / 2));
    let peak = 0;
    let peakAt = 0;
    for (let s = 0; s < half; s++) if (smooth[s]! > peak) { peak = smooth[s]!; peakAt = s; }
    const settled = median(Array.from(smooth.subarray(warm - a)));
    const threshold = settled + 0.1 * (peak - settled);
    let t90: number | null = null;
    if (phase > 0) for (let s = peakAt; s < smooth.length; s++) if (smooth[s]! <= threshold) { t90 = s; break; }
    const byLayer: number[] = [];
    for (let l = 0; l < r.layers; l++) {
      let c = 0;
      let p = 0;
      for (let s = warm; s < b; s++) { c += r.coldPerLayer[s * r.layers + l]!; p += r.picks[s]! / r.layers; }
      byLayer.push(p > 0 ? c / p : 0);
    }
    const picks = sum(r.picks);
    return {
      phase, firstStep: a, steps: b - a, tokens: sum(r.tokens), coldShare: picks > 0 ? sum(r.cold) / picks : 0,
      converged, peak, t90Steps: t90, coldShareByLayer: byLayer,
      swaps: sum(r.swaps), copies: sum(r.copies), refused: sum(r.refused),
    };
  });
}

/** Sum of step times over [from, to), seconds. */
export function seconds(stepUs: Float64Array, from: number, to: number): number {
  let us = 0;
  for (let s = from; s < to; s++) us += stepUs[s]!;
  return us / 1e6;
}
