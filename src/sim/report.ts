// Renders policy reports: a markdown table per phase and an SVG chart of cold share over steps.
import type { PolicyReport } from './run.ts';

const pct = (x: number) => `${(x * 100).toFixed(2)}%`;

/** One row per policy and phase: cold share, converged, peak, T90, moves, modelled tok/s per profile. */
export function phaseTable(reports: readonly PolicyReport[], profiles: readonly string[]): string {
  const head = ['policy', 'phase', 'cold share', 'converged', 'peak', 'T90 steps', ...profiles.map((p) => `T90 s (${p})`), 'swaps', 'copies', 'refused', ...profiles.map((p) => `tok/s (${p})`)];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const r of reports) {
    for (const ph of r.phases) {
      const cells = [
        r.policy, `${ph.phase + 1}: ${ph.domains.join('+')}`, pct(ph.coldShare), pct(ph.converged), pct(ph.peak),
        ph.t90Steps === null ? '-' : String(ph.t90Steps),
        ...profiles.map((p) => { const t = ph.byProfile[p]?.t90Seconds; return t === null || t === undefined ? '-' : t.toFixed(2); }),
        String(ph.swaps), String(ph.copies), String(ph.refused),
        ...profiles.map((p) => (ph.byProfile[p] ? ph.byProfile[p]!.tokPerSec.toFixed(1) : '-')),
      ];
      lines.push(`| ${cells.join(' | ')} |`);
    }
  }
  return lines.join('\n');
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#17becf', '#7f7f7f'];

/** Cold share per window, one line per policy; phase boundaries drawn as dashed lines. */
export function coldShareSvg(reports: readonly PolicyReport[], title: string): string {
  const W = 900; const H = 420; const L = 60; const R = 150; const T = 40; const B = 50;
  const n = Math.max(...reports.map((r) => r.timeline.length), 1);
  const ymax = Math.max(0.01, ...reports.flatMap((r) => r.timeline)) * 1.05;
  const x = (i: number) => L + ((W - L - R) * i) / Math.max(1, n - 1);
  const y = (v: number) => T + (H - T - B) * (1 - v / ymax);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`,
  ];
  for (let k = 0; k <= 5; k++) {
    const v = (ymax * k) / 5;
    out.push(`<text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${(v * 100).toFixed(1)}%</text>`);
    out.push(`<line x1="${L}" y1="${y(v).toFixed(1)}" x2="${W - R}" y2="${y(v).toFixed(1)}" stroke="#eee"/>`);
  }
  const first = reports[0];
  if (first) {
    const ws = first.windowSteps;
    for (const ph of first.phases) {
      const xi = x(ph.firstStep / ws);
      if (ph.phase > 0) out.push(`<line x1="${xi}" y1="${T}" x2="${xi}" y2="${H - B}" stroke="#999" stroke-dasharray="4 4"/>`);
      out.push(`<text x="${xi + 4}" y="${T + 12}" fill="#555">${escapeXml(ph.domains.join('+'))}</text>`);
    }
    out.push(`<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">step (windows of ${ws})</text>`);
    for (let k = 0; k <= 4; k++) {
      const i = Math.round(((n - 1) * k) / 4);
      out.push(`<text x="${x(i)}" y="${H - B + 16}" text-anchor="middle">${i * ws}</text>`);
    }
  }
  reports.forEach((r, j) => {
    const c = COLORS[j % COLORS.length];
    const pts = r.timeline.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    out.push(`<polyline fill="none" stroke="${c}" stroke-width="1.5" points="${pts}"/>`);
    out.push(`<line x1="${W - R + 10}" y1="${T + 10 + j * 18}" x2="${W - R + 30}" y2="${T + 10 + j * 18}" stroke="${c}" stroke-width="3"/>`);
    out.push(`<text x="${W - R + 36}" y="${T + 14 + j * 18}">${escapeXml(r.policy)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
