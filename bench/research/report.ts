// Markdown tables and an SVG chart (step time and cold share over the shift) for the tiered benchmark.
import type { RunFigures } from './figures.ts';
import type { TieredRun } from './harness.ts';

export interface ProtocolResult {
  readonly protocol: string;
  readonly phases: readonly string[];
  readonly runs: readonly TieredRun[];
  readonly figures: readonly RunFigures[];
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const ms = (x: number | null) => (x === null ? '-' : x.toFixed(2));

export function protocolTable(p: ProtocolResult): string {
  const head = ['policy', 'phase', 'median ms', 'x all-hot', 'mean ms', 'cold share', 'converged', 'T90 steps', 'T90 s', 'moves', 'exchanges'];
  const lines = [`**${p.protocol}**`, '', `| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const f of p.figures) {
    for (const ph of f.phases) {
      lines.push(`| ${[
        f.policy, `${ph.phase + 1}: ${p.phases[ph.phase]}`, ph.medianMs.toFixed(3), ph.vsAllHot === null ? '-' : ph.vsAllHot.toFixed(2), ph.meanMs.toFixed(3),
        pct(ph.coldShare), pct(ph.converged), ph.t90Steps === null ? '-' : String(ph.t90Steps),
        ph.t90Seconds === null ? '-' : ph.t90Seconds.toFixed(2), String(ph.moves), String(ph.exchanges),
      ].join(' | ')} |`);
    }
  }
  lines.push('', '| policy | steps overlapping copies | p99 copying ms | p99 plain ms | ratio | matched p99 copying | matched p99 plain | counter share | deferred |', '|---|---|---|---|---|---|---|---|---|');
  for (const f of p.figures) {
    const ratio = f.p99CopyingMs !== null && f.p99PlainMs ? (f.p99CopyingMs / f.p99PlainMs).toFixed(2) : '-';
    lines.push(`| ${f.policy} | ${f.copyingSteps} | ${ms(f.p99CopyingMs)} | ${ms(f.p99PlainMs)} | ${ratio} | ${f.p99CopyingMatched?.toFixed(2) ?? '-'} | ${f.p99PlainMatched?.toFixed(2) ?? '-'} | ${f.counterShare ? pct(f.counterShare) : '-'} | ${f.deferred} |`);
  }
  return lines.join('\n');
}

/** Headline checks of issue 6 on the shifted phase (phase 2) of a shift protocol, for adaptive and adaptive-prior. */
export function targetsTable(p: ProtocolResult): string {
  const by = new Map(p.figures.map((f) => [f.policy, f]));
  const ph = (name: string) => by.get(name)?.phases[1];
  const fx = ph('fixed');
  const or = ph('oracle');
  const op = ph('oracle-phase');
  const df = ph('domain-fit');
  const rows: string[] = [`| target (${p.protocol}, shifted phase) | value | met |`, '|---|---|---|'];
  const ratio = (label: string, num: { medianMs: number; meanMs: number }, den: { medianMs: number; meanMs: number }, ok?: (x: number) => boolean) => {
    const v = num.medianMs / den.medianMs; const m = num.meanMs / den.meanMs;
    rows.push(`| ${label} | ${v.toFixed(2)}x; ${m.toFixed(2)}x | ${ok ? `${ok(v) ? 'yes' : 'no'}; ${ok(m) ? 'yes' : 'no'}` : '-'} |`);
  };
  for (const name of ['adaptive', 'adaptive-prior', 'seed-adaptive']) {
    const ad = ph(name);
    if (!ad) continue;
    if (fx) ratio(`${name} >= 2.5x faster than fixed (median; mean)`, fx, ad, (x) => x >= 2.5);
    if (or) ratio(`${name} within 1.15x of oracle (64-step windows; median; mean)`, ad, or, (x) => x <= 1.15);
    if (op) ratio(`${name} within 1.15x of oracle-phase (whole-phase hindsight map; median; mean)`, ad, op, (x) => x <= 1.15);
    if (df) ratio(`${name} vs domain-fit (the phase's domains' map, placed free: reachable; median; mean)`, ad, df);
    const refs = [op && `oracle-phase ${(op.converged * 100).toFixed(1)}%`, df && `domain-fit ${(df.converged * 100).toFixed(1)}%`].filter(Boolean).join(', ');
    rows.push(`| converged cold share: ${name} ${refs ? `vs ${refs}` : ''} | ${(ad.converged * 100).toFixed(1)}% | - |`);
  }
  if (df && fx) ratio('domain-fit vs fixed (the 2.5x target\'s ceiling for a map fitted on the domains; median; mean)', fx, df);
  const a = by.get('adaptive');
  if (a) {
    rows.push(`| counter < 0.5% of a step | ${(a.counterShare * 100).toFixed(2)}% | ${a.counterShare < 0.005 ? 'yes' : 'no'} |`);
    if (a.p99CopyingMs !== null && a.p99PlainMs) {
      const v = a.p99CopyingMs / a.p99PlainMs;
      rows.push(`| swap-bearing p99 < 1.5x plain p99 (raw) | ${v.toFixed(2)}x | ${v < 1.5 ? 'yes' : 'no'} |`);
    }
    if (a.p99CopyingMatched !== null) rows.push(`| same, matched by cold rows read | ${a.p99CopyingMatched.toFixed(2)}x (plain ${a.p99PlainMatched?.toFixed(2)}) | ${a.p99CopyingMatched < 1.5 ? 'yes' : 'no'} |`);
  }
  return rows.join('\n');
}

const COLORS = ['#7f7f7f', '#d62728', '#ff7f0e', '#1f77b4', '#e377c2', '#bcbd22', '#2ca02c', '#9467bd', '#17becf', '#8c564b'];

function windowed(xs: ArrayLike<number>, w: number, den?: ArrayLike<number>): number[] {
  const out: number[] = [];
  for (let s = 0; s < xs.length; s += w) {
    let a = 0; let b = 0;
    for (let i = s; i < Math.min(s + w, xs.length); i++) { a += xs[i]!; b += den ? den[i]! : 1; }
    out.push(b > 0 ? a / b : 0);
  }
  return out;
}

/** Two panels: mean step time per window (log scale) and cold share per window, one line per policy. */
export function shiftSvg(p: ProtocolResult, windowSteps = 32): string {
  const W = 960; const PH = 260; const L = 70; const R = 150; const T = 40; const GAP = 50;
  const H = T + 2 * PH + GAP + 40;
  const n = Math.max(...p.runs.map((r) => Math.ceil(r.steps / windowSteps)), 2);
  const x = (i: number) => L + ((W - L - R) * i) / (n - 1);
  const times = p.runs.map((r) => windowed(r.stepMs, windowSteps));
  const colds = p.runs.map((r) => windowed(r.coldPicks, windowSteps, r.picks));
  const tmin = Math.max(1e-3, Math.min(...times.flat()));
  const tmax = Math.max(...times.flat(), tmin * 2);
  const yT = (v: number) => T + PH * (1 - (Math.log(Math.max(v, tmin)) - Math.log(tmin)) / (Math.log(tmax) - Math.log(tmin)));
  const cmax = Math.max(0.01, ...colds.flat()) * 1.05;
  const y0 = T + PH + GAP;
  const yC = (v: number) => y0 + PH * (1 - v / cmax);
  const o: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="14">${esc(p.protocol)}: MoE step time (ms, log) and cold share, windows of ${windowSteps} steps</text>`,
  ];
  for (const [top, label] of [[T, 'step ms'], [y0, 'cold share']] as const) {
    o.push(`<line x1="${L}" y1="${top + PH}" x2="${W - R}" y2="${top + PH}" stroke="black"/><line x1="${L}" y1="${top}" x2="${L}" y2="${top + PH}" stroke="black"/>`);
    o.push(`<text x="14" y="${top + PH / 2}" transform="rotate(-90 14 ${top + PH / 2})" text-anchor="middle">${label}</text>`);
  }
  for (let k = 0; k <= 4; k++) {
    const v = Math.exp(Math.log(tmin) + ((Math.log(tmax) - Math.log(tmin)) * k) / 4);
    o.push(`<text x="${L - 6}" y="${(yT(v) + 4).toFixed(1)}" text-anchor="end">${v.toFixed(v < 1 ? 2 : 1)}</text>`);
    const c = (cmax * k) / 4;
    o.push(`<text x="${L - 6}" y="${(yC(c) + 4).toFixed(1)}" text-anchor="end">${(c * 100).toFixed(0)}%</text>`);
  }
  const r0 = p.runs[0];
  if (r0) {
    let last = -1;
    for (let s = 0; s < r0.steps; s++) {
      if (r0.phase[s] !== last) {
        last = r0.phase[s]!;
        const xi = x(s / windowSteps);
        if (s > 0) o.push(`<line x1="${xi}" y1="${T}" x2="${xi}" y2="${y0 + PH}" stroke="#999" stroke-dasharray="4 4"/>`);
        o.push(`<text x="${xi + 4}" y="${T + 12}" fill="#555">${esc(p.phases[last] ?? '')}</text>`);
      }
    }
    o.push(`<text x="${(L + W - R) / 2}" y="${H - 10}" text-anchor="middle">step</text>`);
    for (let k = 0; k <= 4; k++) { const i = Math.round(((n - 1) * k) / 4); o.push(`<text x="${x(i)}" y="${y0 + PH + 16}" text-anchor="middle">${i * windowSteps}</text>`); }
  }
  p.runs.forEach((r, j) => {
    const c = COLORS[j % COLORS.length];
    o.push(`<polyline fill="none" stroke="${c}" stroke-width="1.3" points="${times[j]!.map((v, i) => `${x(i).toFixed(1)},${yT(v).toFixed(1)}`).join(' ')}"/>`);
    o.push(`<polyline fill="none" stroke="${c}" stroke-width="1.3" points="${colds[j]!.map((v, i) => `${x(i).toFixed(1)},${yC(v).toFixed(1)}`).join(' ')}"/>`);
    o.push(`<line x1="${W - R + 10}" y1="${T + 10 + j * 18}" x2="${W - R + 30}" y2="${T + 10 + j * 18}" stroke="${c}" stroke-width="3"/><text x="${W - R + 36}" y="${T + 14 + j * 18}">${esc(r.policy)}</text>`);
  });
  o.push('</svg>');
  return o.join('\n') + '\n';
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
