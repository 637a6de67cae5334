// Picks the adaptive budgets for the tiered geometry on the CPU cost model (no GPU hours): a grid over
// drain_every, half_life_tokens, swaps_per_layer_per_drain, then min_average and hysteresis around the best,
// each candidate run on the shift protocols. Score: how close adaptive converges to the whole-phase
// hindsight map (oracle-phase) in the phases after a shift (2 and 3): the gap in converged cold share,
// then the whole-phase mean step time against oracle-phase's (which also charges slow convergence).
// Tuned on traffic seed 2 and checked on seed 1 (the seed the benchmark runs), so the pick is not fitted
// to the very documents it is then measured on.
//   node dist-tiered/tune-tiered.mjs [--steps 1000 --steps4 800] [--out out/tiered-tune]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Budgets } from '../../src/residency/policy.ts';
import { FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import { loadBenchInputs, runProtocol, type BenchConfig, type Protocol } from './bench.ts';
import { CpuCostExecutor } from './executor.ts';
import { BIG } from './geometry.ts';

const argv = process.argv.slice(2);
const opt = (name: string, dflt: string) => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1]! : dflt; };
const n1 = Number(opt('steps', '1000'));
const n4 = Number(opt('steps4', '800'));
const outDir = opt('out', 'out/tiered-tune');
const tracesDir = opt('traces', process.env['MOE_FIXTURE_DIR'] ? join(process.env['MOE_FIXTURE_DIR'], 'traces') : FIXTURE_TRACES);
const protocols: Protocol[] = [
  { name: 'shift-1u', phases: `en+code:${n1},de+ja:${n1},en+code:${n1}`, users: 1 },
  { name: 'shift-4u', phases: `en+code:${n4},de+ja:${n4},en+code:${n4}`, users: 4 },
];
const { set, seedCounts } = loadBenchInputs(tracesDir, BIG);
const exec = new CpuCostExecutor(BIG);
const t0 = Date.now();

interface PhaseScore { converged: number; wholeMeanMs: number; t90: number | null }
/** Per protocol, phases 2 and 3 (after a shift). */
function phases(policy: string, budgets: Partial<Budgets>, seed: number): PhaseScore[] {
  const out: PhaseScore[] = [];
  for (const p of protocols) {
    const cfg: BenchConfig = { geometry: BIG, protocols: [p], policies: [policy], budgets, insertsPerStep: 8, oracleWindow: 64, fit: 'en+code', seed, seedCounts };
    const r = runProtocol(set, p, cfg, exec);
    const run = r.runs[0]!;
    const f = r.figures[0]!;
    for (const ph of f.phases.slice(1)) {
      let a = 0; while (run.phase[a] !== ph.phase) a++;
      let sum = 0; for (let s = a; s < a + ph.steps; s++) sum += run.stepMs[s]!;
      out.push({ converged: ph.converged, wholeMeanMs: sum / ph.steps, t90: ph.t90Steps });
    }
  }
  return out;
}

const oracle = new Map<number, PhaseScore[]>([1, 2].map((seed) => [seed, phases('oracle-phase', {}, seed)]));
interface Scored { budgets: Partial<Budgets>; gap: number; timeRatio: number; detail: PhaseScore[] }
function score(budgets: Partial<Budgets>, seed: number): Scored {
  const d = phases('adaptive', budgets, seed);
  const o = oracle.get(seed)!;
  const gap = d.reduce((s, x, i) => s + (x.converged - o[i]!.converged), 0) / d.length;
  const timeRatio = d.reduce((s, x, i) => s + x.wholeMeanMs / o[i]!.wholeMeanMs, 0) / d.length;
  return { budgets, gap, timeRatio, detail: d };
}
/** Converged gap first (to 0.1 percentage point), then whole-phase time. */
const better = (a: Scored, b: Scored) => (Math.round(a.gap * 1000) - Math.round(b.gap * 1000)) || (a.timeRatio - b.timeRatio);

const base = { swaps_per_step: 8 };
const current: Partial<Budgets> = { ...base, drain_every: 16, half_life_tokens: 150, swaps_per_layer_per_drain: 4, min_average: 2, hysteresis: 1.5 };
const all: Scored[] = [];
for (const drain_every of [4, 8, 16, 32]) {
  for (const half_life_tokens of [50, 100, 150, 250, 400]) {
    for (const swaps_per_layer_per_drain of [2, 4, 8, 16]) {
      all.push(score({ ...base, drain_every, half_life_tokens, swaps_per_layer_per_drain, min_average: 2, hysteresis: 1.5 }, 2));
    }
  }
}
console.log(`stage 1: ${all.length} candidates in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
const top = [...all].sort(better).slice(0, 4);
for (const t of top) {
  for (const min_average of [0.25, 0.5, 1, 2, 4, 8]) {
    for (const hysteresis of [1.1, 1.25, 1.5, 2]) {
      if (min_average === 2 && hysteresis === 1.5) continue;
      all.push(score({ ...t.budgets, min_average, hysteresis }, 2));
    }
  }
}
all.sort(better);
console.log(`stage 2: ${all.length} candidates in all, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
const pick = all[0]!;
const check = score(pick.budgets, 1);
const was = [score(current, 2), score(current, 1)];
const pct = (x: number) => `${(x * 100).toFixed(2)}pp`;
const row = (label: string, s: Scored) => `| ${label} | ${JSON.stringify(s.budgets)} | ${pct(s.gap)} | ${s.timeRatio.toFixed(3)} | ${s.detail.map((d) => `${(d.converged * 100).toFixed(1)}%/${d.t90 ?? '-'}`).join(', ')} |`;
const md = [
  '# adaptive budgets for the tiered geometry, picked on the CPU cost model', '',
  'gap: adaptive converged cold share minus oracle-phase (the whole-phase hindsight top-H) in phases 2-3 of shift-1u and shift-4u, averaged;',
  'time: whole-phase mean step time / oracle-phase\'s, averaged. per phase: converged cold share / T90 steps (1u p2, 1u p3, 4u p2, 4u p3).', '',
  `oracle-phase converged (seed 2): ${oracle.get(2)!.map((d) => `${(d.converged * 100).toFixed(1)}%`).join(', ')}; (seed 1): ${oracle.get(1)!.map((d) => `${(d.converged * 100).toFixed(1)}%`).join(', ')}`, '',
  '| candidate | budgets | gap | time / oracle-phase | per phase |', '|---|---|---|---|---|',
  row('pick (tuned, seed 2)', pick), row('pick, held-out seed 1', check), row('previous (seed 2)', was[0]!), row('previous, seed 1', was[1]!),
  ...all.slice(1, 12).map((s, i) => row(`#${i + 2}`, s)), '',
  `${all.length} candidates, ${((Date.now() - t0) / 1000).toFixed(1)} s`,
].join('\n');
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'tune.md'), md + '\n');
writeFileSync(join(outDir, 'budgets.json'), JSON.stringify(pick.budgets) + '\n');
writeFileSync(join(outDir, 'tune.json'), JSON.stringify({ pick, check, previous: was, all }, null, 1));
console.log(md);
