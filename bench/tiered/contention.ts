// PCIe contention between row exchanges and in-place cold reads (issue 6: "if a target is missed, find out
// why: ... PCIe contention between swaps and in-place reads"). One layer of the big geometry (18 MiB rows,
// the same kernels and copy stream as bench:tiered), four traffic modes:
//   reads alone:   a step reads N cold rows in place (1 token), nothing on the copy stream;
//   + h2d copies:  the same step while cold -> staging row copies (an exchange's read phase) are in flight;
//   + d2h copies:  while staging -> cold row copies (an exchange's write phase) are in flight;
//   + both:        while copies in both directions are in flight (a pipeline of exchanges).
// A step counts as overlapped only when its copies were enqueued before it and were still running at its end.
// Then the other side: copy throughput alone and while steps read cold rows back to back.
//   node dist-tiered/contention-tiered.mjs [--executor cpu] [--reps 40] [--out DIR]   (GPU: ~20 s)
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CpuCostExecutor, type TieredExecutor } from './executor.ts';
import { BIG, rowBytes, type TieredGeometry } from './geometry.ts';
import { ITEM_INTS, newPlan, type StepPlan } from './plan.ts';
import type { RowCopy } from './rows.ts';

const argv = process.argv.slice(2);
const opt = (name: string, dflt: string) => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1]! : dflt; };
const reps = Number(opt('reps', '40'));
const outDir = opt('out', process.env['OUT'] ?? 'out/tiered-contention');
const g: TieredGeometry = { ...BIG, layers: 1 };
const H = g.hotPerLayer;
const E = g.experts;
const row = rowBytes(g);
const BATCH = 8; // copies per enqueued batch (8 x 18 MiB = 151 MB, ~3-5 ms at PCIe rates)

async function executor(): Promise<TieredExecutor> {
  if (opt('executor', 'cuda') === 'cpu') return new CpuCostExecutor(g);
  const { CudaTieredExecutor } = await import('./cuda-executor.ts');
  return CudaTieredExecutor.create(g);
}

/** Identity slots: expert e in slot e (e < H hot, else cold). */
const slots = Int32Array.from({ length: E }, (_, e) => e);

/** A step reading `n` cold rows (experts H..H+n-1), or `n` hot rows when `hot`, one token each. */
function planOf(n: number, hot: boolean): StepPlan {
  const p = newPlan(g, 1);
  const plan = { ...p, items: new Int32Array(g.layers * Math.max(n, 1) * ITEM_INTS), maxItems: Math.max(n, 1) };
  for (let j = 0; j < n; j++) {
    plan.items[j * ITEM_INTS] = hot ? j : H + j;
    plan.items[j * ITEM_INTS + 1] = 1;
    plan.items[j * ITEM_INTS + 2] = 0;
  }
  plan.counts[0] = n;
  return plan;
}

type Mode = 'none' | 'h2d' | 'd2h' | 'both';
/** Copies that never touch the rows a step reads (cold rows H..H+5 are read; copies use H+8.. and staging). */
function batch(mode: Mode): RowCopy[] {
  const out: RowCopy[] = [];
  for (let k = 0; k < BATCH; k++) {
    const dir = mode === 'both' ? (k % 2 === 0 ? 'h2d' : 'd2h') : mode;
    const cold = H + 8 + (k % 16);
    const stage = E + k;
    out.push(dir === 'h2d' ? { layer: 0, src: cold, dst: stage } : { layer: 0, src: stage, dst: cold });
  }
  return out;
}

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.floor(s.length / 2)]! : NaN; };

const ex = await executor();
const lines: string[] = [];
const log = (s: string) => { console.log(s); lines.push(s); };
const results: Record<string, unknown> = { executor: ex.name, rowBytes: row, reps };
try {
  const cases: Array<{ name: string; plan: StepPlan; bytes: number }> = [
    { name: '1 cold row', plan: planOf(1, false), bytes: row },
    { name: '6 cold rows', plan: planOf(6, false), bytes: 6 * row },
    { name: '6 hot rows', plan: planOf(6, true), bytes: 6 * row },
  ];
  const table: string[] = ['| step reads | mode | steps | median ms | GB/s | x alone |', '|---|---|---|---|---|---|'];
  for (const c of cases) {
    for (let w = 0; w < 5; w++) ex.step(slots, c.plan, null, 1); // warm-up
    let alone = NaN;
    for (const mode of ['none', 'h2d', 'd2h', 'both'] as const) {
      const ms: number[] = [];
      let ticket = -1;
      for (let r = 0; ms.length < reps && r < reps * 20; r++) {
        if (mode !== 'none' && (ticket < 0 || ex.done(ticket))) ticket = ex.copy(batch(mode));
        const t = ex.step(slots, c.plan, null, 1);
        if (mode === 'none' || !ex.done(ticket)) ms.push(t.stepMs);
      }
      while (ticket >= 0 && !ex.done(ticket)) ex.step(slots, planOf(1, true), null, 1);
      const m = median(ms);
      if (mode === 'none') alone = m;
      results[`${c.name} ${mode}`] = { steps: ms.length, medianMs: m };
      table.push(`| ${c.name} | ${mode === 'none' ? 'alone' : `+ ${mode} copies`} | ${ms.length} | ${m.toFixed(3)} | ${(c.bytes / m / 1e6).toFixed(1)} | ${(m / alone).toFixed(2)} |`);
    }
  }
  // Copy throughput: alone (wall clock until the batch is done, the GPU otherwise idle) and under reads.
  // The CPU model has no wall clock to speak of (its copies finish on the modelled clock): GPU only.
  const ctable: string[] = ['| copies | alongside | GB/s | x alone |', '|---|---|---|---|'];
  for (const mode of ex instanceof CpuCostExecutor ? [] : ['h2d', 'd2h', 'both'] as const) {
    let alone = NaN;
    for (const reads of [0, 1, 6]) {
      const rates: number[] = [];
      for (let r = 0; r < 5; r++) {
        const t0 = performance.now();
        const ticket = ex.copy(batch(mode));
        // Without reads, empty steps (uploads only, no kernels) poll: the CPU model's clock advances by steps.
        const plan = planOf(reads, false);
        while (!ex.done(ticket)) ex.step(slots, plan, null, 1);
        rates.push((BATCH * row) / (performance.now() - t0) / 1e6);
      }
      const m = median(rates);
      if (reads === 0) alone = m;
      results[`copy ${mode} reads ${reads}`] = { gbPerS: m };
      ctable.push(`| ${BATCH} x ${mode} | ${reads === 0 ? 'nothing' : `steps reading ${reads} cold row${reads > 1 ? 's' : ''}`} | ${m.toFixed(1)} | ${(m / alone).toFixed(2)} |`);
    }
  }
  log(`# PCIe contention (${ex.name}): 1 layer, ${(row / 2 ** 20).toFixed(0)} MiB rows, ${reps} steps per cell`);
  log('');
  for (const l of table) log(l);
  log('');
  for (const l of ctable) log(l);
} finally {
  ex.close();
}
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'contention.md'), lines.join('\n') + '\n');
writeFileSync(join(outDir, 'contention.json'), JSON.stringify(results, null, 1));
