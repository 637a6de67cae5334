// GPU decode benchmark on tiny-moe (`npm run bench:gpu`, or `node dist/bench-gpu.mjs` on the GPU machine): tok/s at
// 1, 4 and 16 sequences as the engine drives the backend (greedy, the argmax on the device; step by step and run
// ahead), graph replay vs eager launches, the counter's cost (counted vs uncounted steps, alternating blocks),
// long contexts (positions 1024 and 2000), and 49 of 64 experts hot (the rest read in place from host memory).
// Real shapes: dist/bench-real.mjs. Writes $OUT/bench-gpu.json when OUT is set.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import { FED_TOKEN } from '../../src/backend/backend.ts';
import { bySequence, type SequenceBackend } from '../../src/backend/sequences.ts';
import { planPieces } from '../../src/backend/cuda/step/plan.ts';

const dir = process.env['MOE_MODEL_DIR'] ?? 'models/tiny-moe';
if (!existsSync(join(dir, 'config.json'))) throw new Error(`no model at ${dir} (MOE_MODEL_DIR)`);
const STEPS = Number(process.env['BENCH_STEPS'] ?? 1000);
const m = await loadModelFor(dir, 'cuda');
const V = m.spec.vocabSize;
const maxLen = m.spec.maxPositions;
const open = async (hot?: number): Promise<SequenceBackend<CudaBackend>> => bySequence(await createCuda(m, { maxModelLen: maxLen, maxNumSeqs: 16, ...(hot ? { placement: { hotPerLayer: hot } } : {}) }));
const be = await open();
const median = (a: number[]): number => [...a].sort((x, y) => x - y)[a.length >> 1]!;
const results: Record<string, unknown> = { model: dir, steps: STEPS };
const rows: string[] = [];

/** n sequences with `pos` positions filled (one prefill chunk each); closes them after `body`. */
function withBatch<T>(on: SequenceBackend<CudaBackend>, n: number, pos: number, body: () => T): T {
  for (let i = 0; i < n; i++) on.openSequence(i, maxLen);
  on.forward({ chunks: Array.from({ length: n }, (_, i) => ({ seq: i, tokens: Array.from({ length: pos }, (_, t) => (7 * t + 13 * i + 1) % V), startPos: 0 })), count: false });
  try {
    return body();
  } finally {
    for (let i = 0; i < n; i++) on.closeSequence(i);
  }
}

/** Host wall time of a greedy decode step (argmax on the device, tokens read back), median of 5 blocks of `iters`. */
function stepUs(on: SequenceBackend<CudaBackend>, n: number, pos: number, iters: number, count = true): number {
  let k = 0;
  const step = (): void => {
    on.forward({ chunks: Array.from({ length: n }, (_, i) => ({ seq: i, tokens: [(k * 31 + i) % V], startPos: pos })), count, argmaxOnly: true });
    k++;
  };
  for (let i = 0; i < 8; i++) step(); // graphs captured, caches warm; the same positions are rewritten each step
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t = performance.now();
    for (let i = 0; i < iters; i++) step();
    runs.push((1000 * (performance.now() - t)) / iters);
  }
  return median(runs);
}

/** Run ahead (Backend.submit, the engine's greedy decode): the next step submitted, its tokens fed on the device, before this one is waited for. */
function aheadUs(on: SequenceBackend<CudaBackend>, n: number, pos: number, iters: number): number {
  const submit = (k: number) => on.submit({ chunks: Array.from({ length: n }, (_, i) => ({ seq: i, tokens: [k === 0 ? 1 + i : FED_TOKEN], startPos: pos + k })), count: true, argmaxOnly: true });
  let pending = submit(0);
  let t = 0;
  for (let k = 1; k <= iters + 8; k++) {
    if (k === 8) t = performance.now();
    const next = submit(k);
    pending.wait();
    pending = next;
  }
  pending.wait();
  return (1000 * (performance.now() - t)) / (iters + 1);
}

const perBatch: Record<string, unknown> = {};
for (const n of [1, 4, 16]) {
  const r = withBatch(be, n, 64, () => {
    const graph = stepUs(be, n, 64, STEPS);
    be.useGraphs = false;
    const eager = stepUs(be, n, 64, Math.min(STEPS, 300));
    be.useGraphs = true;
    // Counter A/B: alternating blocks counted and not (the same graph: a flag in the step's rows).
    const on: number[] = [], off: number[] = [];
    for (let b = 0; b < 6; b++) { on.push(stepUs(be, n, 64, 200, true)); off.push(stepUs(be, n, 64, 200, false)); }
    const ahead = aheadUs(be, n, 64, Math.min(STEPS, maxLen - 80));
    const prof = be.profilePiece(planPieces(Array.from({ length: n }, (_, i) => ({ seq: i, tokens: [i + 1], startPos: 64 })), 2048, 16)[0]!);
    return { graphUs: graph, eagerUs: eager, counterOnUs: median(on), counterOffUs: median(off), counterRatio: median(on) / median(off), aheadUs: ahead, deviceStepUs: prof.stepUs, submittedUs: prof.submittedUs, launches: prof.launches.length };
  });
  const long = [1024, 2000].map((pos) => ({ pos, us: withBatch(be, n, pos, () => stepUs(be, n, pos, Math.min(STEPS, 40))) }));
  perBatch[n] = { ...r, long };
  rows.push(`| ${n} | ${((n * 1e6) / r.graphUs).toFixed(0)} (${r.graphUs.toFixed(1)} us) | ${((n * 1e6) / r.aheadUs).toFixed(0)} (${r.aheadUs.toFixed(1)} us) | ${r.eagerUs.toFixed(1)} | ${r.deviceStepUs.toFixed(1)} (${r.launches} launches) | ${r.counterOnUs.toFixed(1)} / ${r.counterOffUs.toFixed(1)} (${((r.counterRatio - 1) * 100).toFixed(2)}%) | ${long.map((l) => `${l.us.toFixed(1)}`).join(' / ')} |`);
}
results['perBatch'] = perBatch;
be.dispose();

// 49 of 64 experts hot: the rest read in place over PCIe by the grouped expert kernels.
const cold = await open(49);
const allHot = await open();
const coldRows: Record<string, unknown> = {};
for (const n of [1, 16]) {
  const c = withBatch(cold, n, 64, () => stepUs(cold, n, 64, Math.min(STEPS, 300)));
  const h = withBatch(allHot, n, 64, () => stepUs(allHot, n, 64, Math.min(STEPS, 300)));
  coldRows[`batch${n}`] = { coldUs: c, allHotUs: h };
  rows.push(`| ${n}, 49/64 hot | ${((n * 1e6) / c).toFixed(0)} (${c.toFixed(1)} us; all hot ${h.toFixed(1)} us) | | | | | |`);
}
results['cold49'] = coldRows;
cold.dispose();
allHot.dispose();
m.tensors.close();

if (process.env['OUT']) writeFileSync(join(process.env['OUT'], 'bench-gpu.json'), JSON.stringify(results, null, 2));
console.log(`\nGPU decode, ${dir} (${m.spec.numLayers} layers, ${m.spec.numExperts} experts top-${m.spec.topK}); greedy steps, the argmax on the device, position 64`);
console.log('| batch | tok/s step by step (host us a step) | run ahead | eager launches (us) | device step graph (us) | counted / uncounted (us; cost) | pos 1024 / 2000 (us) |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
