// Whole-model tests on the device, tiny-moe (its experts padded from 48 to 64 units for the kernels): greedy parity
// with the transformers references, routing equal to the CPU backend, the counter inside captured graphs, swaps
// that change nothing, graph == eager.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModel, type LoadedModel } from '../../src/model/load.ts';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { createCuda, type CudaCreateOptions } from '../../src/backend/cuda/create.ts';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import type { SequenceChunk } from '../../src/backend/backend.ts';
import { fixtureDir, modelDir, normErr, rng } from './harness.ts';
import type { SequenceBackend } from '../../src/backend/sequences.ts';
import { bySequence } from '../../src/backend/sequences.ts';

interface Step { token: number; top5_ids: number[]; top5_logits: number[]; routing: number[][] }
interface Case { domain: string; prompt_ids: number[]; prefill_routing: number[][][]; steps: Step[] }

let model: LoadedModel | null = null;
/** The CUDA backend on tiny-moe: room for the parity file's 21 sequences at the model's whole context. */
// float32 KV (the spec the references and the CPU backend keep), a pool of its own size so several live at once.
const createCudaBackend = async (m: LoadedModel, opts: CudaCreateOptions = {}): Promise<SequenceBackend<CudaBackend>> =>
  bySequence(await createCuda(m, { maxNumSeqs: 24, kvCache: { dtype: 'float32', tokens: 65536 }, ...opts }));
async function getModel(): Promise<LoadedModel> {
  model ??= await loadModel(modelDir());
  return model;
}
export const report: Record<string, unknown> = {};

test('greedy parity with parity.json: 21 cases x 40 tokens, top-5 logits, routing (teacher-forced, batched)', async () => {
  const m = await getModel();
  const cases = (JSON.parse(readFileSync(join(fixtureDir(), 'parity.json'), 'utf8')) as { cases: Case[] }).cases;
  const be = await createCudaBackend(m);
  const { numLayers: L, topK: K, vocabSize: V } = m.spec;
  cases.forEach((c, i) => be.openSequence(i, c.prompt_ids.length + c.steps.length + 1));
  // Prefill all prompts in one step (different lengths), then 40 decode steps of 21 sequences each.
  let out = be.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: false, recordRouting: true });
  let tokenMismatch = 0, routeMismatch = 0, routeTotal = 0, maxLogitErr = 0;
  const nearTies: string[] = [];
  let off = 0;
  cases.forEach((c) => {
    c.prompt_ids.forEach((_, t) => {
      for (let l = 0; l < L; l++) {
        routeTotal++;
        const got = Array.from(out.routing!.subarray(((off + t) * L + l) * K, ((off + t) * L + l + 1) * K));
        if (got.join() !== c.prefill_routing[t]![l]!.join()) routeMismatch++;
      }
    });
    off += c.prompt_ids.length;
  });
  const steps = cases[0]!.steps.length;
  for (let s = 0; s < steps; s++) {
    cases.forEach((c, i) => {
      const logits = out.logits.subarray(i * V, (i + 1) * V);
      const ref = c.steps[s]!;
      const tok = argmax(logits, 0, V);
      if (tok !== ref.token) {
        tokenMismatch++;
        const gap = ref.top5_logits[0]! - ref.top5_logits[1]!;
        nearTies.push(`case ${i} (${c.domain}) step ${s}: got ${tok}, ref ${ref.token}, ref top-2 gap ${gap.toFixed(5)}`);
      }
      ref.top5_ids.forEach((id, j) => { maxLogitErr = Math.max(maxLogitErr, Math.abs(logits[id]! - ref.top5_logits[j]!)); });
    });
    const chunks: SequenceChunk[] = cases.map((c, i) => ({ seq: i, tokens: [c.steps[s]!.token], startPos: c.prompt_ids.length + s }));
    out = be.forward({ chunks, count: false, recordRouting: true });
    cases.forEach((c, i) => {
      for (let l = 0; l < L; l++) {
        routeTotal++;
        const got = Array.from(out.routing!.subarray((i * L + l) * K, (i * L + l + 1) * K));
        if (got.join() !== c.steps[s]!.routing[l]!.join()) routeMismatch++;
      }
    });
  }
  be.dispose();
  report['parity'] = { cases: cases.length, steps, tokenMismatch, maxLogitErr, routeMismatch, routeTotal, nearTies };
  console.log(`# parity: ${cases.length} cases x ${steps} tokens, token mismatches ${tokenMismatch}, max |top-5 logit - ref| ${maxLogitErr.toExponential(2)}, routing mismatches ${routeMismatch}/${routeTotal}`);
  for (const n of nearTies) console.log(`#   near-tie? ${n}`);
  assert.equal(tokenMismatch, 0, nearTies.join('\n'));
  assert.ok(maxLogitErr < 2e-3, `top-5 logits off by ${maxLogitErr}`);
});

/**
 * Random token streams through the CPU and CUDA backends: logits and routing, prefill then decode, batched; graphs,
 * eager launches, and the tensor-core products at every decode bucket.
 */
test('CUDA backend equals the CPU backend on random tokens (logits, routing): graphs, eager, tensor-core decode', async () => {
  const m = await getModel();
  const r = rng('model vs cpu');
  const V = m.spec.vocabSize;
  const cpu = bySequence(new CpuBackend(m.spec, m.weights));
  const gpuG = await createCudaBackend(m);
  const gpuE = await createCudaBackend(m, { tuning: { graphs: false } });
  const gpuT = await createCudaBackend(m, { tuning: { tensorCoreDecodeRows: 1 } });
  const seqs = 5;
  const prompts = Array.from({ length: seqs }, (_, i) => Array.from({ length: 3 + i * 4 }, () => Math.floor(((r() + 1) / 2) * V) % V));
  for (const b of [cpu, gpuG, gpuE, gpuT]) prompts.forEach((p, i) => b.openSequence(i, 64));
  let pos = prompts.map((p) => p.length);
  const first = prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 }));
  let worst = 0, worstTc = 0, routeDiff = 0, eagerDiff = 0;
  let chunks: SequenceChunk[] = first;
  for (let s = 0; s < 12; s++) {
    const [a, b, c, e] = [cpu, gpuG, gpuE, gpuT].map((be) => be.forward({ chunks, count: true, recordRouting: true }));
    worst = Math.max(worst, normErr(b!.logits, a!.logits));
    worstTc = Math.max(worstTc, normErr(e!.logits, a!.logits));
    for (let i = 0; i < a!.routing!.length; i++) if (a!.routing![i] !== b!.routing![i] || a!.routing![i] !== e!.routing![i]) routeDiff++;
    for (let i = 0; i < b!.logits.length; i++) if (b!.logits[i] !== c!.logits[i]) eagerDiff++;
    const next = chunks.map((ch, i) => argmax(a!.logits, i * V, V));
    chunks = next.map((t, i) => ({ seq: i, tokens: [t], startPos: pos[i]! }));
    pos = pos.map((p) => p + 1);
  }
  assert.deepEqual(gpuG.readCounter(), cpu.readCounter(), 'counter equals the CPU backend counter');
  assert.deepEqual(gpuT.readCounter(), cpu.readCounter(), 'counter equals the CPU backend counter (tensor-core decode)');
  report['vsCpu'] = { worstLogitErr: worst, worstLogitErrTensorCoreDecode: worstTc, routeDiff, eagerDiff };
  console.log(`# vs cpu: worst normalized logit error ${worst.toExponential(2)}, tensor-core decode ${worstTc.toExponential(2)}, routing differences ${routeDiff}, graph vs eager differing logits ${eagerDiff}`);
  gpuG.dispose();
  gpuE.dispose();
  gpuT.dispose();
  assert.ok(worst < 1e-4 && worstTc < 1e-4, `logits error ${worst} / ${worstTc}`);
  assert.equal(routeDiff, 0);
  assert.equal(eagerDiff, 0, 'graph replay and eager launches compute the same bits');
});

test('counter inside a captured graph equals the histogram of the picks; count:false adds nothing', async () => {
  const m = await getModel();
  const be = await createCudaBackend(m);
  const { numLayers: L, topK: K, numExperts: E } = m.spec;
  const seqs = 4;
  for (let i = 0; i < seqs; i++) be.openSequence(i, 128);
  const hist = new Uint32Array(L * E);
  const before = be.readCounter();
  let toks = [11, 22, 33, 44];
  for (let s = 0; s < 50; s++) {
    const count = s % 5 !== 4; // every fifth step uncounted: same graph, flag off
    const out = be.forward({ chunks: toks.map((t, i) => ({ seq: i, tokens: [t], startPos: s })), count, recordRouting: true });
    if (count) for (let t = 0; t < seqs; t++) for (let l = 0; l < L; l++) for (let k = 0; k < K; k++) hist[l * E + out.routing![(t * L + l) * K + k]!]!++;
    toks = toks.map((_, i) => argmax(out.logits, i * m.spec.vocabSize, m.spec.vocabSize));
  }
  const after = be.readCounter();
  const delta = after.map((v, i) => (v - before[i]!) >>> 0);
  assert.deepEqual(delta, hist);
  console.log(`# counter: ${hist.reduce((a, b) => a + b, 0)} picks counted over 40 counted steps (batch 4, graph), equal to the histogram`);
  be.dispose();
});

test('hot/cold placement and swaps never change a result; swapping back restores the digest', async () => {
  const m = await getModel();
  const r = rng('swaps');
  const allHot = await createCudaBackend(m);
  const split = await createCudaBackend(m, { placement: { hotPerLayer: 40 } });
  const { numLayers: L, numExperts: E, vocabSize: V } = m.spec;
  const digest0 = split.banks.digest();
  for (const b of [allHot, split]) { b.openSequence(0, 64); b.openSequence(1, 64); }
  const done: [number, number, number][] = [];
  let toks = [5, 77];
  for (let s = 0; s < 20; s++) {
    const chunks = toks.map((t, i) => ({ seq: i, tokens: [t], startPos: s }));
    const a = allHot.forward({ chunks, count: false });
    const b = split.forward({ chunks, count: false });
    assert.deepEqual(b.logits, a.logits, `step ${s}: placement changed the logits`);
    for (let j = 0; j < 4; j++) {
      const l = Math.floor(((r() + 1) / 2) * L) % L, h = Math.floor(((r() + 1) / 2) * 40) % 40, c = Math.floor(((r() + 1) / 2) * (E - 40)) % (E - 40);
      split.banks.swapRows(l, h, c);
      done.push([l, h, c]);
    }
    toks = toks.map((_, i) => argmax(a.logits, i * V, V));
  }
  for (const [l, h, c] of done.reverse()) split.banks.swapRows(l, h, c);
  assert.equal(split.banks.digest(), digest0, 'digest restored after undoing every swap');
  for (let l = 0; l < L; l++) for (let e = 0; e < E; e++) assert.equal(split.banks.slotOf(l, e), e, 'slot table restored');
  allHot.dispose();
  split.dispose();
});

test('device argmax (argmaxOnly) picks the argmax of the logits', async () => {
  const m = await getModel();
  const be = await createCudaBackend(m);
  const V = m.spec.vocabSize;
  for (let i = 0; i < 3; i++) be.openSequence(i, 16);
  const chunks = [0, 1, 2].map((i) => ({ seq: i, tokens: [100 + i, 7], startPos: 0 }));
  const logits = be.forward({ chunks, count: false }).logits;
  const g = be.forward({ chunks, count: false, argmaxOnly: true }).argmax!; // same positions rewritten with the same values
  assert.deepEqual(Array.from(g), [0, 1, 2].map((i) => argmax(logits, i * V, V)));
  be.dispose();
});

export function writeReport(dir: string | undefined): void {
  if (dir) writeFileSync(join(dir, 'gpu-tests.json'), JSON.stringify(report, null, 2));
}

/** KV stored in bf16 and fp8 on the device against the CPU spec storing the same dtype (kv-dtype.ts's rounding). */
for (const dtype of ['bfloat16', 'fp8'] as const) {
  test(`${dtype} KV: CUDA equals the CPU spec keeping the same dtype (logits, greedy tokens)`, async () => {
    const m = await getModel();
    const r = rng(`kv ${dtype}`);
    const V = m.spec.vocabSize;
    const cpu = bySequence(new CpuBackend(m.spec, m.weights, { kvCache: { dtype, tokens: 4096 } }));
    const gpu = await createCudaBackend(m, { kvCache: { dtype, tokens: 4096 } });
    const prompts = Array.from({ length: 4 }, (_, i) => Array.from({ length: 5 + 9 * i }, () => Math.floor(((r() + 1) / 2) * V) % V));
    for (const b of [cpu, gpu]) prompts.forEach((_, i) => b.openSequence(i, 128));
    let chunks: SequenceChunk[] = prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 }));
    let pos = prompts.map((p) => p.length);
    let worst = 0, flips = 0;
    for (let s = 0; s < 24; s++) {
      const a = cpu.forward({ chunks, count: false }), b = gpu.forward({ chunks, count: false });
      worst = Math.max(worst, normErr(b.logits, a.logits));
      const next = chunks.map((_, i) => argmax(a.logits, i * V, V));
      next.forEach((t, i) => { if (argmax(b.logits, i * V, V) !== t) flips++; });
      chunks = next.map((t, i) => ({ seq: i, tokens: [t], startPos: pos[i]! }));
      pos = pos.map((p) => p + 1);
    }
    report[`kv_${dtype}_vsCpu`] = { worst, flips };
    console.log(`# kv ${dtype}: CUDA vs the CPU keeping ${dtype}, 4 sequences x 24 steps: worst normalized logit error ${worst.toExponential(2)}, greedy flips ${flips}`);
    cpu.dispose();
    gpu.dispose();
    assert.ok(worst < (dtype === 'fp8' ? 5e-2 : 1e-2), `logits error ${worst}`);
  });
}
