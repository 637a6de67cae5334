// Live-run analysis: the simulator's metrics computed from a residency folder's telemetry
// (telemetry.jsonl per drain, swaps.jsonl per applied swap, steps.json step ring; src/residency/telemetry.ts).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { replaySwapLog, type SwapReplay } from '../residency/swap-log.ts';
import type { DrainLine, StepRingDump, SwapLine } from '../residency/telemetry.ts';

export type { SwapReplay };

export interface LiveRun {
  readonly drains: readonly DrainLine[];
  readonly swaps: readonly SwapLine[];
  readonly ring?: StepRingDump;
  /** Runs found in telemetry.jsonl (boot records; a folder reused across restarts holds several). Only the last is read. */
  readonly runs: number;
  /** The last run's id, when its boot record has one (folders written before boot records have none). */
  readonly run?: string;
  /** Lines of the last run that were skipped: not JSON (a write cut short by a full disk, say) or missing fields. */
  readonly broken: readonly BrokenLine[];
}

/** A line skipped by the reader: where (file:line) and why. */
export interface BrokenLine {
  readonly where: string;
  readonly why: string;
}

function need(ok: boolean, where: string, what: string): void {
  if (!ok) throw new ResidencyError('BAD_ARGUMENT', `${where}: ${what}`);
}

/**
 * The lines of the last run in a .jsonl file (after its last boot record), checked, and the runs seen. A line
 * that does not parse or lacks a field is skipped and reported (a write cut short by a full disk leaves one),
 * not fatal: one bad line does not hide the run. Records of other types (a writer's resync line) are not
 * drains or swaps and are passed over.
 */
function readLines<T>(file: string, check: (o: Record<string, unknown>, where: string) => void): { lines: T[]; runs: number; run?: string; broken: BrokenLine[] } {
  let out: T[] = [];
  let broken: BrokenLine[] = [];
  let runs = 0;
  let run: string | undefined;
  const text = readFileSync(file, 'utf8');
  const all = text.split('\n');
  all.forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${file}:${i + 1}`;
    let o: Record<string, unknown>;
    try { o = JSON.parse(line) as Record<string, unknown>; } catch (err) {
      if (i === all.length - 1 && !text.endsWith('\n')) return; // torn last line (a kill mid-append)
      broken.push({ where, why: `not JSON (${(err as Error).message.slice(0, 120)})` });
      return;
    }
    if (typeof o !== 'object' || o === null || o.v !== 1) {
      broken.push({ where, why: `field 'v' must be 1, got ${JSON.stringify((o as { v?: unknown } | null)?.v)}` });
      return;
    }
    if (o.type === 'boot') {
      runs++;
      run = typeof o.run === 'string' ? o.run : undefined;
      out = [];
      broken = [];
      return;
    }
    if (o.type !== undefined) return;
    try {
      check(o, where);
    } catch (err) {
      broken.push({ where, why: (err as Error).message.slice(where.length + 2) });
      return;
    }
    out.push(o as T);
  });
  // A folder from before boot records: one run, unnamed.
  return { lines: out, runs: Math.max(runs, 1), broken, ...(run ? { run } : {}) };
}

const num = (o: Record<string, unknown>, k: string, where: string) => need(typeof o[k] === 'number' && Number.isFinite(o[k]), where, `field '${k}' must be a number, got ${JSON.stringify(o[k])}`);
const time = (o: Record<string, unknown>, where: string) => need(typeof o.time === 'string' && !Number.isNaN(Date.parse(o.time)), where, `field 'time' must be an ISO time, got ${JSON.stringify(o.time)}`);

/** Reads a residency folder; telemetry.jsonl is required, swaps.jsonl and steps.json are optional. */
export function readLiveRun(dir: string): LiveRun {
  const tele = join(dir, 'telemetry.jsonl');
  if (!existsSync(tele)) throw new ResidencyError('BAD_ARGUMENT', `--residency-dir ${dir}: no telemetry.jsonl (run serve/generate with a residency folder first)`);
  const t = readLines<DrainLine>(tele, (o, w) => { time(o, w); for (const k of ['step', 'window_steps', 'picks', 'cold_share', 'swaps_applied', 'swaps_refused']) num(o, k, w); });
  const drains = t.lines;
  const swapsFile = join(dir, 'swaps.jsonl');
  const sw = existsSync(swapsFile) ? readLines<SwapLine>(swapsFile, (o, w) => { time(o, w); num(o, 'step', w); num(o, 'layer', w); }) : undefined;
  // Swaps of another run (its boot record differs from telemetry's last) would be counted against this one.
  const swaps = sw && sw.run === t.run ? sw.lines : [];
  const stepsFile = join(dir, 'steps.json');
  let ring: StepRingDump | undefined;
  if (existsSync(stepsFile)) {
    let o: Record<string, unknown>;
    try { o = JSON.parse(readFileSync(stepsFile, 'utf8')) as Record<string, unknown>; } catch (err) { throw new ResidencyError('BAD_ARGUMENT', `${stepsFile}: not JSON (${(err as Error).message})`); }
    need(o.v === 1, stepsFile, `field 'v' must be 1`);
    const n = (o.step as unknown[] | undefined)?.length;
    for (const k of ['step', 't_ns', 'tokens', 'swaps', 'swap_ns']) need(Array.isArray(o[k]) && (o[k] as unknown[]).length === n, stepsFile, `field '${k}' must be an array as long as 'step'`);
    // A ring written by an earlier run (this one died before its first flush) is not this run's.
    if (o.run === undefined || o.run === t.run) ring = o as unknown as StepRingDump;
  }
  const broken = [...t.broken, ...(sw && sw.run === t.run ? sw.broken : [])];
  return { drains, swaps, runs: t.runs, broken, ...(ring ? { ring } : {}), ...(t.run ? { run: t.run } : {}) };
}

export interface ShiftFigures {
  readonly step: number;
  readonly how: 'marked' | 'detected';
  readonly peak: number;
  readonly converged: number;
  readonly t90Steps: number | null;
  readonly t90Seconds: number | null;
}

export interface LiveAnalysis {
  readonly drains: number;
  readonly steps: number;
  readonly seconds: number;
  readonly coldShare: number;
  readonly timeline: ReadonlyArray<{ step: number; coldShare: number }>;
  readonly shifts: readonly ShiftFigures[];
  readonly swapsApplied: number;
  readonly swapsRefused: number;
  readonly swapsPerMinute: number;
  /** Step wall time (forward + swap stall), ms, from the ring. */
  readonly swapSteps?: { count: number; p50Ms: number; p99Ms: number };
  readonly swapFreeSteps?: { count: number; p50Ms: number; p99Ms: number };
}

function quantile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : 0;
}
function median(xs: number[]): number {
  return quantile(xs.slice().sort((a, b) => a - b), 0.5);
}

/**
 * A shift is detected at a drain whose cold share is above twice the median of the previous `lookback`
 * drains and at least 1 point higher (a jump, not noise), at most once per `lookback` drains.
 */
export function detectShifts(drains: readonly DrainLine[], lookback = 8): number[] {
  const out: number[] = [];
  let last = -Infinity;
  for (let i = lookback; i < drains.length; i++) {
    const base = median(drains.slice(i - lookback, i).map((d) => d.cold_share));
    const v = drains[i]!.cold_share;
    if (v > 2 * base && v - base > 0.01 && i - last >= lookback) { out.push(drains[i]!.step - drains[i]!.window_steps); last = i; }
  }
  return out;
}

export function analyzeLiveRun(run: LiveRun, marks?: readonly number[]): LiveAnalysis {
  const d = run.drains;
  if (d.length === 0) throw new ResidencyError('BAD_ARGUMENT', 'telemetry.jsonl holds no drain lines');
  const t = (x: { time: string }) => Date.parse(x.time) / 1000;
  const seconds = Math.max(0, t(d[d.length - 1]!) - t(d[0]!));
  const picks = d.reduce((n, x) => n + x.picks, 0);
  const cold = d.reduce((n, x) => n + x.cold_share * x.picks, 0);
  const starts = marks ? [...marks] : detectShifts(d);
  const stepSpan = d[d.length - 1]!.step - d[0]!.step;
  const secondsPerStep = stepSpan > 0 ? seconds / stepSpan : 0;
  const how = marks ? 'marked' : 'detected';
  const shifts = starts.map((s, i): ShiftFigures => {
    const end = i + 1 < starts.length ? starts[i + 1]! : Infinity;
    const seg = d.filter((x) => x.step > s && x.step <= end);
    const half = Math.max(1, Math.floor(seg.length / 2));
    const converged = median(seg.slice(half).map((x) => x.cold_share));
    let peak = 0; let peakAt = 0;
    seg.slice(0, half).forEach((x, j) => { if (x.cold_share > peak) { peak = x.cold_share; peakAt = j; } });
    const threshold = converged + 0.1 * (peak - converged);
    const hit = seg.slice(peakAt).find((x) => x.cold_share <= threshold);
    // Drain at step N covers the window ending at N: the crossing is dated by the window's end.
    const before = d.filter((x) => x.step <= s).pop();
    return {
      step: s, how, peak, converged, t90Steps: hit ? hit.step - s : null,
      // Timed from the last drain before the shift; a shift before the first drain uses the run's mean step time.
      t90Seconds: !hit ? null : before ? t(hit) - t(before) : (hit.step - s) * secondsPerStep,
    };
  });
  const applied = d.reduce((n, x) => n + x.swaps_applied, 0);
  const refused = d.reduce((n, x) => n + x.swaps_refused, 0);
  const out: LiveAnalysis = {
    drains: d.length, steps: d[d.length - 1]!.step, seconds, coldShare: picks ? cold / picks : 0,
    timeline: d.map((x) => ({ step: x.step, coldShare: x.cold_share })), shifts,
    swapsApplied: applied, swapsRefused: refused, swapsPerMinute: seconds > 0 ? applied / (seconds / 60) : 0,
  };
  if (!run.ring || run.ring.step.length === 0) return out;
  const withSwaps: number[] = [];
  const free: number[] = [];
  run.ring.step.forEach((_, i) => {
    const ms = (run.ring!.t_ns[i]! + run.ring!.swap_ns[i]!) / 1e6;
    (run.ring!.swaps[i]! > 0 ? withSwaps : free).push(ms);
  });
  const fig = (xs: number[]) => { const s = xs.sort((a, b) => a - b); return { count: s.length, p50Ms: quantile(s, 0.5), p99Ms: quantile(s, 0.99) }; };
  return { ...out, swapSteps: fig(withSwaps), swapFreeSteps: fig(free) };
}

/** Replays DIR/swaps.jsonl's last run (residency/swap-log.ts). */
export function replaySwaps(dir: string): SwapReplay {
  return replaySwapLog(readFileSync(join(dir, 'swaps.jsonl'), 'utf8'));
}
