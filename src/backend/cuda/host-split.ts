// How the host expert lane splits a layer's cold experts with the GPU: of c distinct cold experts at a decode step the
// host computes take[c] (from DRAM at the host's speed) while the GPU reads the other c - take[c] in place over the
// bus, and the layer waits for the slower side. Both sides' times are measured while serving (the host's threads time
// each request by its count of experts; op_host_collect times the GPU's side of each layer by its count of in-place
// experts), each fitted with a line (fixed cost + cost an expert, decayed so the fit follows the machine's speed of the
// moment), and take[c] is the split whose slower side is fastest. The split only moves work between the sides: every
// pick has the same bits wherever it is computed.
import { ResidencyError } from '../../errors.ts';

/** Counts and summed nanoseconds by index (requests of h host experts, layers of m in-place experts), 0..maxPicks. */
export interface SplitCounts {
  readonly n: Float64Array;
  readonly ns: Float64Array;
}

/** A side's time for x experts: fixedUs + perExpertUs x. */
export interface TimeLine {
  readonly fixedUs: number;
  readonly perExpertUs: number;
}

/** Priors while little is measured: the host reads an expert at ~80 GB/s, the GPU over the bus at ~50 GB/s (H200 and its host). */
const HOST_PRIOR_BYTES_PER_US = 80e3;
const GPU_PRIOR_BYTES_PER_US = 50e3;
/** Weight of the priors' two points against measured layers (a decode step of 16 MoE layers measures 16). */
const PRIOR_WEIGHT = 4;
/** Each update keeps this much of what was measured before it (64-step updates: a half-life of 64 steps). */
const KEEP = 0.5;
/** The request's hand-off both ways (the host seeing the post, the GPU seeing the answer; mapped memory ~2 us a round trip). */
export const HANDOFF_US = 3;

/** Weighted least-squares line through (x, mean y) points; the prior's slope where the points cannot fix one. */
export function fitLine(points: readonly { x: number; w: number; y: number }[], prior: TimeLine): TimeLine {
  let sw = 0, sx = 0, sy = 0;
  for (const p of points) { sw += p.w; sx += p.w * p.x; sy += p.w * p.y; }
  if (sw <= 0) return prior;
  const mx = sx / sw, my = sy / sw;
  let sxx = 0, sxy = 0;
  for (const p of points) { sxx += p.w * (p.x - mx) ** 2; sxy += p.w * (p.x - mx) * (p.y - my); }
  const slope = sxx > 1e-9 * sw ? sxy / sxx : prior.perExpertUs;
  // A side never gets faster with more experts; a negative fixed cost is the fit's noise.
  const perExpertUs = Math.max(slope, prior.perExpertUs / 100);
  return { fixedUs: Math.max(0, my - perExpertUs * mx), perExpertUs };
}

/** take[c] for c = 0..maxPicks: the host's count whose slower side is fastest (ties: fewer on the host). */
export function chooseTakes(host: TimeLine, gpu: TimeLine, maxPicks: number): Int32Array {
  const take = new Int32Array(maxPicks + 1);
  const hostUs = (h: number): number => (h === 0 ? 0 : host.fixedUs + HANDOFF_US + host.perExpertUs * h);
  const gpuUs = (m: number): number => gpu.fixedUs + gpu.perExpertUs * m;
  for (let c = 1; c <= maxPicks; c++) {
    let best = 0, bestUs = Infinity;
    for (let h = 0; h <= c; h++) {
      const us = Math.max(hostUs(h), gpuUs(c - h));
      if (us < bestUs - 1e-9) { best = h; bestUs = us; }
    }
    take[c] = best;
  }
  return take;
}

/** take[c] = ceil(share c): a fixed share (--host-expert-share). */
export function fixedTakes(share: number, maxPicks: number): Int32Array {
  if (!(share > 0 && share <= 1)) throw new ResidencyError('BAD_ARGUMENT', `host experts: share must be in (0, 1], got ${share}`);
  return Int32Array.from({ length: maxPicks + 1 }, (_, c) => Math.min(c, Math.ceil(c * share - 1e-9)));
}

export interface SplitReport {
  /** 'measured': take[] follows the fitted lines; 'fixed': a share given. */
  readonly mode: 'measured' | 'fixed';
  readonly take: readonly number[];
  readonly host: TimeLine;
  readonly gpu: TimeLine;
  /** Layers posted to the host so far, and the GPU's mean wait for an answer over them (us). */
  readonly hostLayers: number;
  readonly meanWaitUs: number;
}

/** The split's state: decayed measurements of both sides, their lines and the table they give. */
export class HostSplit {
  private readonly hostAcc: SplitCounts;
  private readonly gpuAcc: SplitCounts;
  private readonly hostPrior: TimeLine;
  private readonly gpuPrior: TimeLine;
  private hostLine: TimeLine;
  private gpuLine: TimeLine;
  private takes: Int32Array;
  private waited = { n: 0, ns: 0 };

  /** share: a fixed share (the table never moves); absent: measured. */
  constructor(rowBytes: number, private readonly maxPicks: number, private readonly share?: number) {
    const zero = (): SplitCounts => ({ n: new Float64Array(maxPicks + 1), ns: new Float64Array(maxPicks + 1) });
    this.hostAcc = zero();
    this.gpuAcc = zero();
    this.hostPrior = { fixedUs: 10, perExpertUs: rowBytes / HOST_PRIOR_BYTES_PER_US };
    this.gpuPrior = { fixedUs: 20, perExpertUs: rowBytes / GPU_PRIOR_BYTES_PER_US };
    this.hostLine = this.hostPrior;
    this.gpuLine = this.gpuPrior;
    this.takes = share !== undefined ? fixedTakes(share, maxPicks) : chooseTakes(this.hostLine, this.gpuLine, maxPicks);
  }

  get measured(): boolean {
    return this.share === undefined;
  }

  table(): Int32Array {
    return this.takes;
  }

  /**
   * What was measured since the last update: the host's requests by their experts, the GPU's layers by their in-place
   * experts, the GPU's waits by the host's experts. Decays the older measurements, refits both lines and (measured)
   * chooses the table again. Returns whether the table changed.
   */
  update(host: SplitCounts, gpu: SplitCounts, wait: SplitCounts): boolean {
    const fold = (acc: SplitCounts, d: SplitCounts): void => {
      for (let i = 0; i <= this.maxPicks; i++) {
        acc.n[i] = KEEP * acc.n[i]! + d.n[i]!;
        acc.ns[i] = KEEP * acc.ns[i]! + d.ns[i]!;
      }
    };
    fold(this.hostAcc, host);
    fold(this.gpuAcc, gpu);
    for (let i = 0; i <= this.maxPicks; i++) { this.waited.n += wait.n[i]!; this.waited.ns += wait.ns[i]!; }
    const points = (acc: SplitCounts, prior: TimeLine, priorXs: number[]) => {
      const p = priorXs.map((x) => ({ x, w: PRIOR_WEIGHT, y: prior.fixedUs + prior.perExpertUs * x }));
      for (let i = 0; i <= this.maxPicks; i++) if (acc.n[i]! > 0) p.push({ x: i, w: acc.n[i]!, y: acc.ns[i]! / acc.n[i]! / 1e3 });
      return p;
    };
    this.hostLine = fitLine(points(this.hostAcc, this.hostPrior, [1, 2]), this.hostPrior);
    this.gpuLine = fitLine(points(this.gpuAcc, this.gpuPrior, [0, 1]), this.gpuPrior);
    if (!this.measured) return false;
    const next = chooseTakes(this.hostLine, this.gpuLine, this.maxPicks);
    const changed = next.some((v, i) => v !== this.takes[i]);
    this.takes = next;
    return changed;
  }

  report(): SplitReport {
    return {
      mode: this.measured ? 'measured' : 'fixed', take: Array.from(this.takes), host: this.hostLine, gpu: this.gpuLine,
      hostLayers: this.waited.n, meanWaitUs: this.waited.n ? this.waited.ns / this.waited.n / 1e3 : 0,
    };
  }
}

/** A line as a short text: "12 + 118/expert us". */
export function lineText(l: TimeLine): string {
  return `${l.fixedUs.toFixed(0)} + ${l.perExpertUs.toFixed(0)}/expert us`;
}
