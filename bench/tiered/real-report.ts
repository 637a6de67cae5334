// Figures of the product tiered benchmark: per policy and phase the median step (second half of the phase),
// cold share, T90 after a shift (src/sim/metrics.ts, the simulator's definition), swap-bearing p99; a table
// and an SVG chart of step time and cold share over the shift.
import { phaseMetrics, smoothedColdShare } from '../../src/sim/metrics.ts';
import type { PolicyRun } from './run-policy.ts';
import type { Phase } from './traffic.ts';

export interface PhaseFigures {
  readonly phase: string;
  readonly medianMs: number;
  readonly meanMs: number;
  readonly tokS: number;
  readonly coldShare: number;
  readonly converged: number;
  readonly t90Steps: number | null;
  readonly t90S: number | null;
  readonly landed: number;
}

export interface PolicyFigures {
  readonly policy: string;
  readonly phases: PhaseFigures[];
  /** p99 step of steps with moves in flight vs without (after the first phase; a one-phase run: all), how many of each. */
  readonly p99Moving: number;
  readonly p99Plain: number;
  readonly plainSteps: number;
  readonly movingSteps: number;
  readonly landed: number;
}

function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return 0;
  const a = xs.slice().sort((x, y) => x - y);
  return a[Math.min(a.length - 1, Math.floor(q * a.length))]!;
}

export function summarize(runs: readonly PolicyRun[], phases: readonly Phase[], users: number): PolicyFigures[] {
  return runs.map((r) => {
    const pm = phaseMetrics(r);
    let at = 0;
    const figs = phases.map((p, i) => {
      const a = at, b = at + p.steps;
      at = b;
      const half = Array.from(r.stepMs.subarray(a + Math.floor(p.steps / 2), b));
      const medianMs = quantile(half, 0.5);
      const t90 = pm[i]!.t90Steps;
      let t90S: number | null = null;
      if (t90 !== null) { t90S = 0; for (let k = a; k < a + t90; k++) t90S += r.stepMs[k]! / 1000; }
      let landed = 0;
      for (let k = a; k < b; k++) landed += r.swaps[k]!;
      return {
        phase: p.name, medianMs, meanMs: half.reduce((x, y) => x + y, 0) / Math.max(1, half.length), tokS: (1000 * users) / medianMs,
        coldShare: pm[i]!.coldShare, converged: pm[i]!.converged, t90Steps: t90, t90S, landed,
      };
    });
    const first = phases.length > 1 ? phases[0]!.steps : 0;
    const moving: number[] = [];
    const plain: number[] = [];
    for (let k = first; k < r.steps; k++) (r.moving[k] ? moving : plain).push(r.stepMs[k]!);
    return { policy: r.policy, phases: figs, p99Moving: quantile(moving, 0.99), p99Plain: quantile(plain, 0.99), movingSteps: moving.length, plainSteps: plain.length, landed: r.landed };
  });
}

export function tableMarkdown(sum: readonly PolicyFigures[], ctx: { H: number; E: number; users: number; layers: number; counterShare: number; counterNoise: number }): string {
  const fixed = sum.find((p) => p.policy === 'fixed');
  const lines = [
    `## ${ctx.layers} layers, ${ctx.H}/${ctx.E} experts hot per layer, ${ctx.users} user(s)`,
    '',
    '| policy | phase | median step ms | tok/s | vs fixed | cold share | converged | T90 steps | T90 s | moves landed |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const p of sum) {
    p.phases.forEach((f, i) => {
      const fx = fixed?.phases[i];
      const ratio = fx ? (fx.medianMs / f.medianMs).toFixed(2) + 'x' : '-';
      lines.push(`| ${p.policy} | ${i + 1} ${f.phase} | ${f.medianMs.toFixed(3)} | ${f.tokS.toFixed(0)} | ${ratio} | ${(100 * f.coldShare).toFixed(1)}% | ${(100 * f.converged).toFixed(1)}% | ${f.t90Steps ?? '-'} | ${f.t90S === null ? '-' : f.t90S.toFixed(2)} | ${f.landed} |`);
    });
  }
  lines.push('', '| policy | p99 step, moves in flight (ms) | p99 step, none (ms) | ratio | steps with moves in flight | moves landed |', '|---|---|---|---|---|---|');
  for (const p of sum) {
    // '-' where a side has no steps (no moves at all, or moves in flight at every step).
    const ratio = p.movingSteps && p.plainSteps ? (p.p99Moving / p.p99Plain).toFixed(2) + 'x' : '-';
    lines.push(`| ${p.policy} | ${p.movingSteps ? p.p99Moving.toFixed(3) : '-'} | ${p.plainSteps ? p.p99Plain.toFixed(3) : '-'} | ${ratio} | ${p.movingSteps} | ${p.landed} |`);
  }
  lines.push('', `counter: ${(100 * ctx.counterShare).toFixed(2)}% of a step (median step counting on vs off, all hot; ` +
    `noise: ${(100 * ctx.counterNoise).toFixed(2)}%, the off blocks against each other)`, '');
  return lines.join('\n');
}

const COLORS = ['#444', '#1f77b4', '#2ca02c', '#d62728', '#9467bd', '#ff7f0e', '#8c564b'];

/** Two panels over the run's steps: step time (median of 64-step windows) and cold share (256-step centred window). */
export function chartSvg(runs: readonly PolicyRun[], phases: readonly Phase[], title: string): string {
  const W = 900, PH = 220, X0 = 60, Y0 = 30, GAP = 50;
  const n = runs[0]?.steps ?? 1;
  const x = (s: number): number => X0 + ((W - X0 - 20) * s) / n;
  const series = runs.map((r) => {
    const ms: [number, number][] = [];
    for (let s = 0; s < r.steps; s += 64) {
      const w = Array.from(r.stepMs.subarray(s, Math.min(r.steps, s + 64))).sort((a, b) => a - b);
      ms.push([s + 32, w[w.length >> 1]!]);
    }
    const cs = smoothedColdShare(r, 256, 0, r.steps);
    const cold: [number, number][] = [];
    for (let s = 0; s < r.steps; s += 32) cold.push([s, cs[s]!]);
    return { name: r.policy, ms, cold };
  });
  const maxMs = Math.max(...series.flatMap((q) => q.ms.map((p) => p[1]))) * 1.05;
  const maxCold = Math.max(0.05, ...series.flatMap((q) => q.cold.map((p) => p[1]))) * 1.05;
  const panel = (top: number, label: string, max: number, pick: (q: (typeof series)[number]) => [number, number][], fmt: (v: number) => string): string[] => {
    const y = (val: number): number => top + PH - (PH * val) / max;
    const out = [`<text x="${X0}" y="${top - 8}" font-size="12">${label}</text>`, `<rect x="${X0}" y="${top}" width="${W - X0 - 20}" height="${PH}" fill="none" stroke="#999"/>`];
    for (let k = 0; k <= 4; k++) out.push(`<text x="${X0 - 6}" y="${y((max * k) / 4) + 4}" font-size="10" text-anchor="end">${fmt((max * k) / 4)}</text>`);
    let at = 0;
    for (const p of phases.slice(0, -1)) { at += p.steps; out.push(`<line x1="${x(at)}" y1="${top}" x2="${x(at)}" y2="${top + PH}" stroke="#bbb" stroke-dasharray="4 3"/>`); }
    series.forEach((q, i) => out.push(`<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.3" points="${pick(q).map(([s, val]) => `${x(s).toFixed(1)},${y(val).toFixed(1)}`).join(' ')}"/>`));
    return out;
  };
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${2 * PH + 2 * GAP + 40}" font-family="sans-serif">`,
    `<text x="${X0}" y="16" font-size="14">${title}</text>`,
    ...panel(Y0 + 20, 'step time, ms (median of 64 steps)', maxMs, (q) => q.ms, (val) => val.toFixed(1)),
    ...panel(Y0 + 20 + PH + GAP, 'cold share (256-step window)', maxCold, (q) => q.cold, (val) => `${(100 * val).toFixed(0)}%`),
    ...series.map((q, i) => `<text x="${X0 + 10 + i * 120}" y="${2 * PH + 2 * GAP + 30}" font-size="12" fill="${COLORS[i % COLORS.length]}">— ${q.name}</text>`),
    `<text x="${W - 20}" y="${2 * PH + 2 * GAP + 30}" font-size="10" text-anchor="end">steps; phases: ${phases.map((p) => p.name).join(' → ')}</text>`,
    '</svg>',
  ];
  return parts.join('\n');
}
