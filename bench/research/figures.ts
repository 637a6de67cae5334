// Figures of a tiered run per phase: median step time after warm-up and its ratio to all-hot, cold share,
// T90 in steps (src/sim/metrics.ts on the physical cold picks) and in measured seconds, moves, and the
// p99 of steps that overlap exchange copies against steps that do not.
import { DEFAULT_METRICS, phaseMetrics, type MetricOptions } from '../../src/sim/metrics.ts';
import type { TieredRun } from './harness.ts';

export interface PhaseFigures {
  readonly phase: number;
  readonly steps: number;
  /** Median step time over the phase's second half, ms. */
  readonly medianMs: number;
  /** Mean step time over the second half, ms (at 1 user the median is quantized by whole cold rows). */
  readonly meanMs: number;
  /** medianMs / all-hot's medianMs in the same phase (null without an all-hot run). */
  readonly vsAllHot: number | null;
  readonly coldShare: number;
  readonly converged: number;
  readonly t90Steps: number | null;
  readonly t90Seconds: number | null;
  /** Policy moves (swaps + copies) decided in the phase; exchanges started on rows. */
  readonly moves: number;
  readonly exchanges: number;
}

export interface RunFigures {
  readonly policy: string;
  readonly phases: readonly PhaseFigures[];
  /** p99 step time of steps overlapping exchange copies, and of the others (after the first phase), ms. */
  readonly p99CopyingMs: number | null;
  readonly p99PlainMs: number | null;
  /** Same, each step divided by the median plain step with the same number of cold rows read. */
  readonly p99CopyingMatched: number | null;
  readonly p99PlainMatched: number | null;
  readonly copyingSteps: number;
  /** Median counter kernel time over median step time (0 when not counting). */
  readonly counterShare: number;
  readonly deferred: number;
}

export function quantile(xs: ArrayLike<number>, q: number): number | null {
  if (xs.length === 0) return null;
  const a = Array.from(xs).sort((x, y) => x - y);
  return a[Math.min(a.length - 1, Math.floor(q * (a.length - 1) + 0.5))]!;
}

export function figures(run: TieredRun, allHot: TieredRun | null, o: MetricOptions = DEFAULT_METRICS): RunFigures {
  const pm = phaseMetrics(run.replay, o);
  const hotPm = allHot ? phaseMetrics(allHot.replay, o) : null;
  const medianOf = (r: TieredRun, a: number, b: number) => quantile(r.stepMs.subarray(a + Math.floor((b - a) * o.warmupFraction), b), 0.5) ?? 0;
  const phases = pm.map((m, i): PhaseFigures => {
    const a = m.firstStep;
    const b = a + m.steps;
    const med = medianOf(run, a, b);
    const w = a + Math.floor((b - a) * o.warmupFraction);
    let sum = 0;
    for (let s = w; s < b; s++) sum += run.stepMs[s]!;
    const mean = sum / Math.max(1, b - w);
    const hp = hotPm?.[i];
    const hotMed = hp && allHot ? medianOf(allHot, hp.firstStep, hp.firstStep + hp.steps) : null;
    let t90s: number | null = null;
    if (m.t90Steps !== null) { t90s = 0; for (let s = a; s < a + m.t90Steps; s++) t90s += run.stepMs[s]! / 1000; }
    let ex = 0;
    for (let s = a; s < b; s++) ex += run.started[s]!;
    return {
      phase: i, steps: m.steps, medianMs: med, meanMs: mean, vsAllHot: hotMed ? med / hotMed : null, coldShare: m.coldShare,
      converged: m.converged, t90Steps: m.t90Steps, t90Seconds: t90s, moves: m.swaps + m.copies, exchanges: ex,
    };
  });
  const from = pm.length > 1 ? pm[1]!.firstStep : 0;
  const copying: number[] = [];
  const plain: number[] = [];
  const plainByRows = new Map<number, number[]>();
  for (let s = from; s < run.steps; s++) {
    if (run.copying[s]! > 0) copying.push(s);
    else {
      plain.push(s);
      const k = run.coldRows[s]!;
      if (!plainByRows.has(k)) plainByRows.set(k, []);
      plainByRows.get(k)!.push(run.stepMs[s]!);
    }
  }
  const medByRows = new Map<number, number>();
  for (const [k, xs] of plainByRows) medByRows.set(k, quantile(xs, 0.5)!);
  const matched = (ss: number[]) => ss.filter((s) => medByRows.has(run.coldRows[s]!)).map((s) => run.stepMs[s]! / medByRows.get(run.coldRows[s]!)!);
  let deferred = 0;
  for (let s = 0; s < run.steps; s++) deferred += run.deferred[s]!;
  const medCount = quantile(run.countMs, 0.5) ?? 0;
  const medStep = quantile(run.stepMs, 0.5) ?? 1;
  return {
    policy: run.policy, phases,
    p99CopyingMs: quantile(copying.map((s) => run.stepMs[s]!), 0.99), p99PlainMs: quantile(plain.map((s) => run.stepMs[s]!), 0.99),
    p99CopyingMatched: quantile(matched(copying), 0.99), p99PlainMatched: quantile(matched(plain), 0.99),
    copyingSteps: copying.length, counterShare: medCount / medStep, deferred,
  };
}
