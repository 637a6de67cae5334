// The family fixtures on the device: $FAMILY_FIXTURES, comma-separated family names or "all", each
// checkpoint generated from fixtures/<family>/config.json and checked against fixtures/<family>/parity.json (the
// format of fixtures/README.md: 8 cases, greedy steps, top-5 logits, routing). For each: greedy
// tokens against the transformers float32 references (mismatches only at reported near-ties), top-5 logits,
// routing ids against the references (mismatches reported with the reference's weight gap), CUDA vs the CPU
// backend (the spec) on the same teacher-forced run, and half the experts cold giving the very same logits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../../src/model/load.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { Backend, StepOutput } from '../../src/backend/backend.ts';
import type { BankPlacement } from '../../src/backend/slot-tables.ts';
import { normErr } from './harness.ts';
import { report } from './model.gpu.ts';
import { HUB_FP8, writeTwins } from '../fp8-twin.ts';
import { FAMILIES, INT4_FAMILIES, familyCheckpoint, familyParity, type Family } from '../../fixtures/fixture-paths.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

interface Step { token: number; top5_ids: number[]; top5_logits: number[]; routing: number[][]; routing_weights: number[][] }
interface Case { prompt_ids: number[]; prefill_routing: number[][][]; steps: Step[] }
interface Fixture { cases: Case[]; moe_layers: number[] }

/** KV stored in float32: the references' and the CPU spec's numbers (bf16 and fp8 KV are checked by test/gpu/paged.gpu.ts). */
const KV_DTYPE = 'float32' as const;
const named = (process.env['FAMILY_FIXTURES'] ?? '').split(',').filter((f) => f !== '');
const unknown = named.filter((f) => f !== 'all' && !(FAMILIES as readonly string[]).includes(f));
if (unknown.length > 0) throw new Error(`FAMILY_FIXTURES: unknown ${unknown.join(', ')}; expected "all" or some of ${FAMILIES.join(', ')}`);
// "all": the families CUDA computes (its INT4 kernels are to come; the 4-bit fixtures run on the CPU meanwhile).
const fixtures = (named.includes('all') ? FAMILIES.filter((f) => !(INT4_FAMILIES as readonly string[]).includes(f)) : (named as Family[])).map((name) => ({ name, dir: familyCheckpoint(name) }));

/** Prefill every case in one step, then teacher-forced decode steps (all cases batched), recording routing. */
function run(be: Backend, cases: Case[]): StepOutput[] {
  const seqs = new DirectSequences(be);
  cases.forEach((c, i) => seqs.open(i, c.prompt_ids.length + c.steps.length + 1));
  const outs = [seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: false, recordRouting: true })];
  for (let s = 0; s + 1 < cases[0]!.steps.length; s++) {
    outs.push(seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: [c.steps[s]!.token], startPos: c.prompt_ids.length + s })), count: true, recordRouting: true }));
  }
  seqs.closeAll();
  return outs;
}

type CudaModel = Awaited<ReturnType<typeof loadModelFor>>;

/** The run on the CUDA backend (a placement, or decode through the tensor-core products when given). */
async function cudaRun(m: CudaModel, cases: Case[], placement?: BankPlacement, tensorCoreDecodeRows?: number): Promise<StepOutput[]> {
  const be = await createCuda(m, { maxModelLen: 128, maxNumSeqs: cases.length, kvCache: { dtype: KV_DTYPE, tokens: 128 * (cases.length + 2) }, ...(placement ? { placement } : {}), ...(tensorCoreDecodeRows !== undefined ? { tuning: { tensorCoreDecodeRows } } : {}) });
  try {
    return run(be, cases);
  } finally {
    be.dispose();
  }
}

/** The same run on the CPU backend (the spec). */
async function cpuRun(dir: string, cases: Case[]): Promise<StepOutput[]> {
  const cm = await loadModel(dir);
  const cpu = new CpuBackend(cm.spec, cm.weights, { threads: 4 });
  await cpu.ready();
  try {
    return run(cpu, cases);
  } finally {
    cpu.dispose();
  }
}

/** The largest normalized logit error between two runs, row by row. */
function worstErr(a: StepOutput[], b: StepOutput[], rows: number, V: number): number {
  let e = 0;
  a.forEach((o, s) => { for (let i = 0; i < rows; i++) e = Math.max(e, normErr(o.logits.subarray(i * V, (i + 1) * V), b[s]!.logits.subarray(i * V, (i + 1) * V))); });
  return e;
}

/** Logits that differ at all between two runs (placement must change nothing). */
function differing(a: StepOutput[], b: StepOutput[]): number {
  let n = 0;
  a.forEach((o, s) => { for (let j = 0; j < o.logits.length; j++) if (o.logits[j] !== b[s]!.logits[j]) n++; });
  return n;
}

for (const { name, dir } of fixtures) {
  test(`family fixture ${name} on CUDA: greedy tokens and top-5 logits vs transformers, routing, CUDA vs CPU < 1e-3, half cold = all hot`, async () => {
    const fx = JSON.parse(readFileSync(familyParity(name), 'utf8')) as Fixture;
    const cases = fx.cases;
    const m = await loadModelFor(dir, 'cuda');
    const { vocabSize: V, topK: K, numExperts: E } = m.spec;
    const Lm = fx.moe_layers.length;
    const gpu = await cudaRun(m, cases);
    let tokenMismatch = 0, maxTopErr = 0, routeMismatch = 0, routeChecks = 0;
    const notes: string[] = [];
    const routeGap = (w: number[]): number => (w.length > 1 ? Math.min(...w.slice(1).map((x, j) => w[j]! - x)) : Infinity);
    const checkRoute = (got: Int32Array, at: number, want: number[], weights: number[] | undefined, where: string): void => {
      routeChecks++;
      const g = Array.from(got.subarray(at, at + K));
      if (g.join() !== want.join()) {
        routeMismatch++;
        notes.push(`routing ${where}: got [${g}], ref [${want}]${weights ? `, ref weight gap ${routeGap(weights).toExponential(1)}` : ''}`);
      }
    };
    // Prefill routing: rows in chunk order.
    let row = 0;
    cases.forEach((c, i) => {
      c.prompt_ids.forEach((_, t) => {
        for (let l = 0; l < Lm; l++) checkRoute(gpu[0]!.routing!, ((row + t) * Lm + l) * K, c.prefill_routing[t]![l]!, undefined, `case ${i} prompt token ${t} layer ${l}`);
      });
      row += c.prompt_ids.length;
    });
    gpu.forEach((o, s) => {
      cases.forEach((c, i) => {
        const lg = o.logits.subarray(i * V, (i + 1) * V);
        const ref = c.steps[s]!;
        const tok = argmax(lg, 0, V);
        if (tok !== ref.token) {
          tokenMismatch++;
          notes.push(`token case ${i} step ${s}: got ${tok}, ref ${ref.token}, ref top-2 margin ${(ref.top5_logits[0]! - ref.top5_logits[1]!).toFixed(5)}`);
        }
        ref.top5_ids.forEach((id, j) => { maxTopErr = Math.max(maxTopErr, Math.abs(lg[id]! - ref.top5_logits[j]!)); });
        // Decode step s's routing is the routing of token steps[s - 1] (the first decode step feeds steps[0]).
        if (s > 0) for (let l = 0; l < Lm; l++) checkRoute(o.routing!, (i * Lm + l) * K, c.steps[s - 1]!.routing[l]!, c.steps[s - 1]!.routing_weights[l], `case ${i} step ${s - 1} layer ${l}`);
      });
    });
    // Half the experts in host memory: the same numbers, bit for bit.
    const placementDiffs = differing(await cudaRun(m, cases, { hotPerLayer: Math.floor(E / 2) }), gpu);
    // The decode steps (8 rows) through the tensor-core products instead of the gemv: the same numbers within fp32 error.
    const tcErr = worstErr(await cudaRun(m, cases, undefined, 8), gpu, cases.length, V);
    m.tensors.close();
    // The spec: the CPU backend, the same run.
    const vsCpu = worstErr(gpu, await cpuRun(dir, cases), cases.length, V);
    const steps = cases[0]!.steps.length;
    report[`family_${name}`] = { cases: cases.length, steps, tokenMismatch, maxTopErr, routeMismatch, routeChecks, vsCpu, placementDiffs, tensorCoreDecodeVsGemv: tcErr, notes };
    console.log(`# family ${name}: ${cases.length} cases x ${steps} steps, ${tokenMismatch} token flips vs transformers, top-5 logit err ${maxTopErr.toExponential(2)}, routing ${routeMismatch}/${routeChecks} differ, vs CPU ${vsCpu.toExponential(2)}, half cold vs all hot ${placementDiffs} logits differ, tensor-core decode vs gemv ${tcErr.toExponential(2)}`);
    for (const n of notes.slice(0, 12)) console.log(`#   ${n}`);
    assert.ok(vsCpu < 1e-3, `CUDA vs CPU normalized logit error ${vsCpu}`);
    assert.equal(placementDiffs, 0, 'placement changed a result');
    assert.ok(tcErr < 1e-4, `tensor-core decode vs gemv normalized logit error ${tcErr}`);
    assert.ok(maxTopErr < 2e-3, `top-5 logits off by ${maxTopErr}`);
    for (const n of notes.filter((x) => x.startsWith('token'))) assert.ok(Number(n.split('margin ')[1]) < 1e-3, `a flip away from a near-tie: ${n}`);
  });
}

// DeepSeek-V3's hub format on the device: the fixture's block-FP8 twin (test/fp8-twin.ts, written as
// make-checkpoint --format fp8 does) against the CPU backend on the same FP8 checkpoint (the references are the
// bf16 weights', not these), half the experts cold, and decode through the tensor-core products.
for (const { name, dir } of fixtures.filter((f) => f.name === 'deepseek-v3-tiny')) {
  test('family fixture deepseek-v3-tiny in block FP8 on CUDA: vs the CPU on the same FP8 weights < 1e-3, half cold = all hot, tensor-core decode = gemv', async () => {
    const cases = (JSON.parse(readFileSync(familyParity(name), 'utf8')) as Fixture).cases;
    const root = mkdtempSync(join(tmpdir(), 'ds-fp8-'));
    try {
      const fp8 = join(root, 'fp8');
      for (const d of [fp8, join(root, 'f32')]) mkdirSync(d);
      await writeTwins(dir, fp8, join(root, 'f32'), HUB_FP8);
      const m = await loadModelFor(fp8, 'cuda');
      const { vocabSize: V, numExperts: E } = m.spec;
      assert.equal(m.spec.quantization?.method, 'fp8');
      const gpu = await cudaRun(m, cases);
      const placementDiffs = differing(await cudaRun(m, cases, { hotPerLayer: Math.floor(E / 2) }), gpu);
      const tcErr = worstErr(await cudaRun(m, cases, undefined, 8), gpu, cases.length, V);
      m.tensors.close();
      const vsCpu = worstErr(gpu, await cpuRun(fp8, cases), cases.length, V);
      report['family_deepseek-v3-tiny_fp8'] = { cases: cases.length, vsCpu, placementDiffs, tensorCoreDecodeVsGemv: tcErr };
      console.log(`# family deepseek-v3-tiny in block FP8: ${cases.length} cases, vs CPU ${vsCpu.toExponential(2)}, half cold vs all hot ${placementDiffs} logits differ, tensor-core decode vs gemv ${tcErr.toExponential(2)}`);
      assert.ok(vsCpu < 1e-3, `CUDA vs CPU normalized logit error ${vsCpu}`);
      assert.equal(placementDiffs, 0, 'placement changed a result');
      assert.ok(tcErr < 1e-4, `tensor-core decode vs gemv ${tcErr}`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
}

// DeepSeek's YaRN as the hub's V3 / R1 configs carry it (factor 40, mscale = mscale_all_dim = 1: YaRN's frequencies,
// cos and sin unscaled, the softmax scale times (0.1 ln 40 + 1)^2): the fixture's weights under that config, CUDA
// against the CPU backend (the spec; transformers' formula is checked in src/model/families/families.test.ts), half
// the experts cold.
for (const { name, dir } of fixtures.filter((f) => f.name === 'deepseek-v3-tiny')) {
  test('family fixture deepseek-v3-tiny under DeepSeek\'s YaRN (factor 40, mscale_all_dim 1) on CUDA: vs the CPU < 1e-3, half cold = all hot', async () => {
    const cases = (JSON.parse(readFileSync(familyParity(name), 'utf8')) as Fixture).cases;
    const root = mkdtempSync(join(tmpdir(), 'ds-yarn-'));
    try {
      for (const f of readdirSync(dir)) if (f !== 'config.json') symlinkSync(join(dir, f), join(root, f));
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      const theta = (config['rope_parameters'] as { rope_theta: number }).rope_theta;
      writeFileSync(join(root, 'config.json'), JSON.stringify({ ...config, rope_parameters: { rope_type: 'yarn', rope_theta: theta, factor: 40, mscale: 1, mscale_all_dim: 1, beta_fast: 32, beta_slow: 1, original_max_position_embeddings: 64 } }));
      const m = await loadModelFor(root, 'cuda');
      const { vocabSize: V, numExperts: E } = m.spec;
      assert.ok(m.spec.rope?.yarn && m.spec.mla!.softmaxScale > 1.8 * (m.spec.mla!.qkNopeDim + m.spec.headDim) ** -0.5, 'YaRN with the softmax correction');
      const gpu = await cudaRun(m, cases);
      const placementDiffs = differing(await cudaRun(m, cases, { hotPerLayer: Math.floor(E / 2) }), gpu);
      m.tensors.close();
      const vsCpu = worstErr(gpu, await cpuRun(root, cases), cases.length, V);
      report['family_deepseek-v3-tiny_yarn'] = { cases: cases.length, vsCpu, placementDiffs };
      console.log(`# family deepseek-v3-tiny under YaRN (factor 40, mscale_all_dim 1): ${cases.length} cases, vs CPU ${vsCpu.toExponential(2)}, half cold vs all hot ${placementDiffs} logits differ`);
      assert.ok(vsCpu < 1e-3, `CUDA vs CPU normalized logit error ${vsCpu}`);
      assert.equal(placementDiffs, 0, 'placement changed a result');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
}
