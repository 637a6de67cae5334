// Real shapes on the device: a make-checkpoint checkpoint ($REAL_CKPT, e.g. qwen3-30b-a3b x 2
// layers) against make-checkpoint's transformers float32 references (greedy tokens, flips only at reported
// near-ties) and against the CPU backend, the spec (normalized logit error < 1e-3); prefill as one batch,
// decode batched in graphs. Also: a corrupt weight is refused naming the tensor, on every CUDA path.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../../src/model/load.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { FED_TOKEN } from '../../src/backend/backend.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { createEngine } from '../../src/engine/engine.ts';
import { runToCompletion } from '../../src/engine/complete.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { Backend } from '../../src/backend/backend.ts';
import type { KernelTuning } from '../../src/backend/cuda/tuning.ts';
import { modelDir, normErr } from './harness.ts';
import { report } from './model.gpu.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

interface RefCase { domain: string; prompt_ids: number[]; tokens: number[]; top5_ids: number[][]; top5_logits: number[][] }

const dir = process.env['REAL_CKPT'];
const skip = dir && existsSync(join(dir, 'refs.json')) ? false : 'REAL_CKPT (a make-checkpoint folder with refs.json) not set';

/** Prefill every case in one step, then teacher-forced decode steps (all cases batched): logits per step. */
function run(be: Backend, cases: RefCase[], steps: number, forced: (c: number, s: number) => number): Float32Array[][] {
  const V = be.spec.vocabSize;
  const seqs = new DirectSequences(be);
  cases.forEach((c, i) => seqs.open(i, c.prompt_ids.length + steps + 1));
  const out: Float32Array[][] = cases.map(() => []);
  let o = seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: false });
  for (let s = 0; s < steps; s++) {
    cases.forEach((_, i) => out[i]!.push(o.logits.slice(i * V, (i + 1) * V)));
    if (s === steps - 1) break;
    o = seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: [forced(i, s)], startPos: c.prompt_ids.length + s })), count: true });
  }
  seqs.closeAll();
  return out;
}

test('real shapes: greedy tokens equal the transformers float32 references (near-ties reported), CUDA vs CPU < 1e-3', { skip }, async () => {
  const refs = (JSON.parse(readFileSync(join(dir!, 'refs.json'), 'utf8')) as { cases: RefCase[] }).cases;
  const steps = refs[0]!.tokens.length;
  const m = await loadModelFor(dir!, 'cuda');
  const be = await createCuda(m, { maxModelLen: 256, maxNumSeqs: refs.length, kvCache: { dtype: 'float32', tokens: 256 * (refs.length + 2) } });
  const gpu = run(be, refs, steps, (c, s) => refs[c]!.tokens[s]!);
  let mismatch = 0, maxTopErr = 0;
  const nearTies: string[] = [];
  refs.forEach((c, i) => {
    for (let s = 0; s < steps; s++) {
      const lg = gpu[i]![s]!;
      const tok = argmax(lg, 0, lg.length);
      c.top5_ids[s]!.forEach((id, j) => { maxTopErr = Math.max(maxTopErr, Math.abs(lg[id]! - c.top5_logits[s]![j]!)); });
      if (tok !== c.tokens[s]) {
        mismatch++;
        nearTies.push(`case ${i} (${c.domain}) step ${s}: got ${tok}, ref ${c.tokens[s]}, ref top-2 margin ${(c.top5_logits[s]![0]! - c.top5_logits[s]![1]!).toFixed(5)}`);
      }
    }
  });
  // The same cases one at a time (batch 1: other buckets, other graphs) must agree with the batch.
  const single = run(be, [refs[0]!], steps, (_c, s) => refs[0]!.tokens[s]!);
  let batchErr = 0;
  for (let s = 0; s < steps; s++) batchErr = Math.max(batchErr, normErr(single[0]![s]!, gpu[0]![s]!));
  // The prompt fed 8 tokens a step (decode-sized pieces whose rows read each other's positions) must agree
  // with the one-chunk prefill (tensor-core path).
  const c0 = refs[0]!;
  const seqs = new DirectSequences(be);
  seqs.open(0, c0.prompt_ids.length + steps + 1);
  let last: Float32Array = new Float32Array(0);
  for (let at = 0; at < c0.prompt_ids.length; at += 8) {
    last = seqs.forward({ chunks: [{ seq: 0, tokens: c0.prompt_ids.slice(at, at + 8), startPos: at }], count: false }).logits;
  }
  const chunked: Float32Array[] = [last];
  for (let st = 0; st < steps - 1; st++) {
    chunked.push(seqs.forward({ chunks: [{ seq: 0, tokens: [c0.tokens[st]!], startPos: c0.prompt_ids.length + st }], count: false }).logits);
  }
  seqs.close(0);
  let chunkErr = 0;
  for (let st = 0; st < steps; st++) chunkErr = Math.max(chunkErr, normErr(chunked[st]!, gpu[0]![st]!));
  be.dispose();
  const gpuLine = `${refs.length} cases x ${steps} steps, ${mismatch} token flips vs transformers [${nearTies.join('; ')}], top-5 logit err ${maxTopErr.toExponential(2)}, batch vs single ${batchErr.toExponential(2)}, prompt in 8-token steps vs one prefill ${chunkErr.toExponential(2)}`;
  // The CUDA figures first: a CPU twin that cannot run (REAL_CPU=0) or fails must not hide them.
  console.log(`# real size (CUDA): ${gpuLine}`);
  assert.ok(batchErr < 1e-4, `batch vs single ${batchErr}`);
  assert.ok(chunkErr < 1e-4, `prompt in 8-token steps vs one prefill ${chunkErr}`);
  for (const t of nearTies) assert.ok(Number(t.split('margin ')[1]) < 0.05, `a flip away from a near-tie: ${t}`);
  if (process.env['REAL_CPU'] === '0') {
    report['realSize'] = { dir, cases: refs.length, steps, mismatch, nearTies, maxTopErr, batchVsSingle: batchErr, chunkedVsPrefill: chunkErr, vsCpu: 'skipped (REAL_CPU=0)' };
    return;
  }

  // The spec: the CPU backend on the same checkpoint, two cases, teacher-forced by the references.
  const cm = await loadModel(dir!, { weights: true, raw: false });
  const cpu = new CpuBackend(cm.spec, cm.weights, { threads: 8 });
  await cpu.ready();
  const few = refs.slice(0, 2);
  const want = run(cpu, few, steps, (c, s) => few[c]!.tokens[s]!);
  cpu.dispose();
  let vsCpu = 0, cpuTokDiff = 0;
  few.forEach((_, i) => {
    for (let s = 0; s < steps; s++) {
      vsCpu = Math.max(vsCpu, normErr(gpu[i]![s]!, want[i]![s]!));
      if (argmax(gpu[i]![s]!, 0, gpu[i]![s]!.length) !== argmax(want[i]![s]!, 0, want[i]![s]!.length)) cpuTokDiff++;
    }
  });
  report['realSize'] = { dir, cases: refs.length, steps, mismatch, nearTies, maxTopErr, batchVsSingle: batchErr, chunkedVsPrefill: chunkErr, vsCpu, cpuTokDiff };
  console.log(`# real size: ${gpuLine}, vs CPU ${vsCpu.toExponential(2)} (${cpuTokDiff} argmax diffs)`);
  assert.ok(vsCpu < 1e-3, `CUDA vs CPU normalized logit error ${vsCpu}`);
});

test('real shapes: early weight loads (PDL), evict-first loads, q|k|v in one wave, the fused residual (batch 1) change no bit; unsplit attention, the merge order', { skip }, async () => {
  const refs = (JSON.parse(readFileSync(join(dir!, 'refs.json'), 'utf8')) as { cases: RefCase[] }).cases.slice(0, 4);
  const steps = Math.min(refs[0]!.tokens.length, 12);
  // A long prompt too (the references' prompts joined, >= 160 tokens): decode attention split over 8 blocks at batch 1.
  const long: RefCase = { ...refs[0]!, prompt_ids: [] };
  while (long.prompt_ids.length < 160) long.prompt_ids.push(...refs.flatMap((c) => c.prompt_ids));
  const m = await loadModelFor(dir!, 'cuda');
  // Batch 4 (the bucket of 4 rows) and batch 1, each as the decode graphs replay them.
  const logits = async (tuning: Partial<KernelTuning>): Promise<Float32Array[][]> => {
    const be = await createCuda(m, { maxModelLen: 512, maxNumSeqs: refs.length, tuning, kvCache: { dtype: 'float32', tokens: 512 * (refs.length + 2) } });
    try {
      const forced = (c: number, st: number): number => refs[c % refs.length]!.tokens[st]!;
      return [...run(be, refs, steps, forced), ...run(be, [refs[1]!], steps, (_c, st) => forced(1, st)), ...run(be, [long], steps, forced)];
    } finally {
      be.dispose();
    }
  };
  const base = await logits({});
  const diff = (other: Float32Array[][]): number => {
    let n = 0;
    base.forEach((seq, i) => seq.forEach((lg, st) => { for (let j = 0; j < lg.length; j++) if (lg[j] !== other[i]![st]![j]) n++; }));
    return n;
  };
  const late = diff(await logits({ earlyWeights: false }));
  const values = base.reduce((a, seq) => a + seq.reduce((b, lg) => b + lg.length, 0), 0);
  const plain = diff(await logits({ evictFirst: false }));
  console.log(`# real size (early loads): of ${values} logits, ${late} differ with the weight loads after the wait, ${plain} without evict-first`);
  // Without the fused residual: batch 4 (sequences 0-3) runs the same launches, so the same bits; batch 1 (4, 5) adds
  // the picks in the same order and normalizes each layer's input in op_residual_norm, in the q|k|v gemv's sum order
  // (norm_in_gemv_order): the same bits too (the host expert lane's steps combine there).
  const unfused = await logits({ fuseResidual: false });
  let batch4Diff = 0, batch1Diff = 0;
  base.forEach((seq, i) => seq.forEach((lg, st) => {
    const o = unfused[i]![st]!;
    for (let j = 0; j < lg.length; j++) if (!Object.is(lg[j], o[j])) { if (i < refs.length) batch4Diff++; else batch1Diff++; }
  }));
  console.log(`# real size (fused residual): batch 4 ${batch4Diff} logits differ, batch 1 ${batch1Diff}`);
  assert.equal(batch4Diff, 0, 'batch 4 is not fused');
  assert.equal(batch1Diff, 0, 'fused residual vs the residual+norm launches: the same bits');
  const oneWave = diff(await logits({ oneWaveDense: false }));
  console.log(`# real size (q|k|v at 2 features a warp vs in one wave): ${oneWave} logits differ`);
  assert.equal(oneWave, 0, 'the even feature split changes no logit (each feature the same sums, another warp)');
  // Short rows' attention unsplit (no merge): the same softmax, merged in another order.
  const unsplit = await logits({ attendMinBlocks: 0 });
  let splitErr = 0, splitTok = 0;
  base.forEach((seq, i) => seq.forEach((lg, st) => {
    const o = unsplit[i]![st]!;
    splitErr = Math.max(splitErr, normErr(lg, o));
    if (argmax(lg, 0, lg.length) !== argmax(o, 0, o.length)) splitTok++;
  }));
  console.log(`# real size (attention unsplit below 256 positions): normalized error ${splitErr.toExponential(2)}, ${splitTok} argmax diffs`);
  assert.ok(splitErr < 1e-5 && splitTok === 0, `attention unsplit vs split: ${splitErr}, ${splitTok} argmax diffs`);
  assert.equal(late, 0, 'early weight loads change no logit');
  assert.equal(plain, 0, 'evict-first weight loads change no logit');
});

test('real shapes: run-ahead decoding (each token fed from the step before on the device) gives step-by-step greedy\'s tokens', { skip }, async () => {
  const refs = (JSON.parse(readFileSync(join(dir!, 'refs.json'), 'utf8')) as { cases: RefCase[] }).cases.slice(0, 4);
  const m = await loadModelFor(dir!, 'cuda');
  const tokens = async (runAhead: boolean, reqs: number): Promise<{ out: number[][]; fed: number }> => {
    const be = await createCuda(m, { maxModelLen: 512, maxNumSeqs: refs.length, kvCache: { dtype: 'float32', tokens: 512 * (refs.length + 2) } });
    let fed = 0;
    if (be.submit) {
      const submit = be.submit.bind(be);
      be.submit = (input) => (input.chunks.some((c) => c.tokens[0] === FED_TOKEN) && fed++, submit(input));
    }
    try {
      // Different lengths, so requests leave the batch (and the step run past each end is dropped) at different steps.
      const done = await runToCompletion(createEngine(be, { runAhead }), refs.slice(0, reqs).map((c, i) => ({ id: `r${i}`, promptIds: c.prompt_ids, sampling: { temperature: 0, topP: 1, maxTokens: 20 + 3 * i, ignoreEos: true } })));
      return { out: refs.slice(0, reqs).map((_, i) => done.get(`r${i}`)!.tokens), fed };
    } finally {
      be.dispose();
    }
  };
  for (const reqs of [1, 4]) {
    const plain = await tokens(false, reqs);
    const ahead = await tokens(true, reqs);
    console.log(`# real size (run-ahead): ${reqs} request(s), ${ahead.fed} steps fed on the device, tokens ${JSON.stringify(ahead.out) === JSON.stringify(plain.out) ? 'equal' : 'DIFFER'}`);
    assert.equal(plain.fed, 0);
    assert.ok(ahead.fed >= 15, `fed steps: ${ahead.fed}`);
    assert.deepEqual(ahead.out, plain.out);
  }
});

/** A copy of checkpoint `src` whose tensor `name` starts with a NaN (0xFFFF bf16) in its shard. */
function poisonedCopy(src: string, name: string): string {
  const tmp = mkdtempSync(join(tmpdir(), 'nan-ckpt-'));
  cpSync(src, tmp, { recursive: true, dereference: true });
  const indexPath = join(tmp, 'model.safetensors.index.json');
  const file = existsSync(indexPath) ? (JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map: Record<string, string> }).weight_map[name]! : 'model.safetensors';
  const shard = join(tmp, file);
  // Positioned reads and one 2-byte write: shards are larger than a Buffer may be.
  const fd = openSync(shard, 'r+');
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const hlen = Number(len.readBigUInt64LE(0));
    const hb = Buffer.alloc(hlen);
    readSync(fd, hb, 0, hlen, 8);
    const header = JSON.parse(hb.toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
    writeSync(fd, Buffer.from([0xff, 0xff]), 0, 2, 8 + hlen + header[name]!.data_offsets[0]);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

for (const [which, src] of [['tiny-moe', modelDir()], ['real shapes', dir]] as const) {
  // bf16 0xFFFF and float8_e4m3fn 0xFF are both NaN, and so is an E8M0 scale of 0xFF: quantized checkpoints' experts are poisoned too.
  const quant = which === 'real shapes' && !skip && existsSync(join(src!, 'config.json')) ? JSON.parse(readFileSync(join(src!, 'config.json'), 'utf8')).quantization_config?.quant_method : undefined;
  // MXFP4: a 0xFF scale byte (E8M0 NaN) and a NaN expert bias.
  const more = quant === 'fp8' ? ['model.layers.1.mlp.experts.5.down_proj.weight', 'model.layers.0.self_attn.q_proj.weight']
    : quant === 'mxfp4' ? ['model.layers.1.mlp.experts.gate_up_proj_scales', 'model.layers.0.mlp.experts.down_proj_bias'] : [];
  for (const name of ['model.norm.weight', ...more]) {
    test(`a NaN weight is refused at load naming the tensor (${which}, ${name})`, { skip: which === 'real shapes' ? skip : false }, async () => {
      const tmp = poisonedCopy(src!, name);
      try {
        const mm = await loadModelFor(tmp, 'cuda');
        await assert.rejects(createCuda(mm, { maxModelLen: 64, maxNumSeqs: 1, kvCache: { tokens: 256 } }), (e: Error & { code?: string }) => e.code === 'BAD_CHECKPOINT' && e.message.includes(name));
        mm.tensors.close();
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    });
  }
}
