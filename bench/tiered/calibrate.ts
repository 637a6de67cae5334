// Checks the CPU cost model against a GPU run of the tiered benchmark (its tiered.json): runs the same
// protocols, policy and budgets on the model at several copy rates and prints, per phase, the exchanges
// started and the converged cold share next to the GPU's, so the copy rate can be read off the GPU run.
//   node dist-tiered/calibrate-tiered.mjs out/device-2026-11-30/tiered/tiered.json
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import { loadBenchInputs, runProtocol, type BenchConfig, type Protocol } from './bench.ts';
import { CpuCostExecutor, MODEL } from './executor.ts';
import { BIG } from './geometry.ts';

interface GpuRun { budgets: Record<string, number>; results: { protocol: string; figures: { policy: string; phases: { converged: number; coldShare: number; exchanges: number; meanMs: number }[] }[] }[] }
const file = process.argv[2] ?? 'out/device-2026-11-30/tiered/tiered.json';
const gpu = JSON.parse(readFileSync(file, 'utf8')) as GpuRun;
const rates = (process.argv[3] ?? '55,40,30,25,20,15').split(',').map(Number);
const tracesDir = process.env['MOE_FIXTURE_DIR'] ? join(process.env['MOE_FIXTURE_DIR'], 'traces') : FIXTURE_TRACES;
const { set, seedCounts } = loadBenchInputs(tracesDir, BIG);
const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
for (const r of gpu.results) {
  const [name, rest] = r.protocol.split(' (');
  const users = Number(rest!.split(' ')[0]);
  const phases = r.protocol.split(': ')[1]!;
  const p: Protocol = { name: name!, phases, users };
  const g = r.figures.find((f) => f.policy === 'adaptive')!;
  console.log(`${r.protocol}\n  gpu:        ${g.phases.map((ph) => `${ph.exchanges} ex, conv ${pct(ph.converged)}, cold ${pct(ph.coldShare)}, mean ${ph.meanMs.toFixed(2)} ms`).join(' | ')}`);
  for (const rate of rates) {
    const exec = new CpuCostExecutor(BIG, { ...MODEL, copyBytesPerMs: rate * 1e6 });
    const cfg: BenchConfig = { geometry: BIG, protocols: [p], policies: ['adaptive'], budgets: gpu.budgets, insertsPerStep: 8, oracleWindow: 64, fit: 'en+code', seed: 1, seedCounts };
    const f = runProtocol(set, p, cfg, exec).figures[0]!;
    console.log(`  model ${String(rate).padStart(3)}: ${f.phases.map((ph) => `${ph.exchanges} ex, conv ${pct(ph.converged)}, cold ${pct(ph.coldShare)}, mean ${ph.meanMs.toFixed(2)} ms`).join(' | ')}`);
  }
}
