// bench:gpu at real size (H200): loads a make-checkpoint checkpoint through the product's CUDA backend (op
// path: streamed from the shards, finite-checked on the device) and prints load time, GB/s and peak host RSS;
// decode tok/s at batch 1/4/16 (graphs, position ~64); prefill tok/s at 512 and 2048 tokens (one chunk);
// each kernel's time and share of HBM bandwidth in a batch-1 decode step; llama.cpp's figures beside them.
//   node dist/bench-real.mjs [--model /tmp/q30] [--layers 16] [--out DIR] [--tc-rows N] [--batches 1,4,16] [--ab]
//   (no --model: makes the checkpoint; --tc-rows: decode buckets of >= N rows take the tensor-core products,
//   0 never; default the backend's; --ab: early weight loads, PDL and evict-first loads switched off one at a time, and
//   the kernels of each dist/kernels-NAME folder beside dist/kernels)
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { CudaBackend, CudaBackendOptions } from '../../src/backend/cuda/cuda-backend.ts';
import { planPieces } from '../../src/backend/cuda/step/plan.ts';
import { FED_TOKEN } from '../../src/backend/backend.ts';
import { createEngine } from '../../src/engine/engine.ts';
import { runToCompletion } from '../../src/engine/complete.ts';
import { bySequence, type SequenceBackend } from '../../src/backend/sequences.ts';
import { attentionProducts, mlaProducts, productBytes } from '../../src/backend/cuda/weights/device-weights.ts';

const { values } = parseArgs({ options: { model: { type: 'string' }, out: { type: 'string' }, steps: { type: 'string', default: '64' }, layers: { type: 'string', default: '16' }, 'tc-rows': { type: 'string' }, batches: { type: 'string', default: '1,4,16' }, ab: { type: 'boolean', default: false } } });
// Without --model the checkpoint is made here (the device has torch and transformers) by the repo's
// make-checkpoint.py: qwen3-30b-a3b geometry, --layers deep, no references (~12 s for 16 layers).
if (!values.model) {
  const script = 'fixtures/make/make-checkpoint.py';
  if (!existsSync(script)) throw new Error(`--model DIR (a make-checkpoint folder), or run from the repository root to make one with ${script}`);
  values.model = `/tmp/bench-real-q${values.layers}`;
  if (!existsSync(join(values.model, 'config.json'))) {
    process.stderr.write(`making ${values.model} with ${script} (qwen3-30b-a3b, ${values.layers} layers)\n`);
    const r = spawnSync('python3', [script, '--preset', 'qwen3-30b-a3b', '--layers', values.layers, '--out', values.model, '--refs', '0'], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`make-checkpoint failed (rc ${r.status ?? r.error?.message})`);
  }
}
const HBM = 4.3e12; // measured device copy bandwidth on this H200 (bytes read + written per second)
const LLAMA = { tg128: 518, pp512: 8152 }; // llama.cpp, same geometry, 16 layers, bf16, all on the GPU (issue 11)

const t0 = performance.now();
const m = await loadModelFor(values.model, 'cuda');
let last = 0;
const maxLen = Math.min(4096, m.spec.maxPositions);
const be = bySequence(await createCuda(m, {
  maxModelLen: maxLen, maxNumSeqs: 16, ...(values['tc-rows'] !== undefined ? { tuning: { tensorCoreDecodeRows: Number(values['tc-rows']) } } : {}),
  onProgress: (done, total) => { if (done - last > total / 10 || done === total) { last = done; process.stderr.write(`load ${((100 * done) / total).toFixed(0)}% ${(done / 1e9 / ((performance.now() - t0) / 1000)).toFixed(2)} GB/s\n`); } },
}));
const loadS = (performance.now() - t0) / 1000;
const bytes = m.tensors.totalBytes;
const rssGiB = (process.resourceUsage().maxRSS * 1024) / 2 ** 30;
const s = m.spec;
const V = s.vocabSize;
const prompt = Array.from({ length: maxLen }, (_, i) => (i * 7919 + 13) % V);

// Decode with every step's logits into one buffer (StepInput.logitsInto, what the engine passes when a request
// samples); 'fresh': a new array a step instead (what forward() returns without it); 'argmax': each row's argmax
// on the device and no logits copied (StepInput.argmaxOnly, the engine's greedy steps).
type Out = 'into' | 'fresh' | 'argmax';
function decode(B: number, steps: number, on: SequenceBackend<CudaBackend> = be, out: Out = 'into'): { tokS: number; msStep: number } {
  const into = out === 'into' ? new Float32Array(B * V) : undefined;
  const argmaxOnly = out === 'argmax';
  return afterPrompts(on, B, steps, () => {
    const step = (k: number): void => {
      on.forward({ chunks: Array.from({ length: B }, (_, i) => ({ seq: i, tokens: [prompt[(i + k) % V]!], startPos: 64 + k })), count: true, argmaxOnly, ...(into ? { logitsInto: into } : {}) });
    };
    for (let k = 0; k < 4; k++) step(k);
    const t = performance.now();
    for (let k = 4; k < steps + 4; k++) step(k);
    return (performance.now() - t) / steps;
  });
}

// B sequences of a 64-token prompt each (room for `steps` more and some), `run` timing their decode (ms a step),
// then closed: decode() and decodeAhead()'s common frame.
function afterPrompts(on: SequenceBackend<CudaBackend>, B: number, steps: number, run: () => number): { tokS: number; msStep: number } {
  for (let i = 0; i < B; i++) on.openSequence(i, 64 + steps + 8);
  on.forward({ chunks: Array.from({ length: B }, (_, i) => ({ seq: i, tokens: prompt.slice(i, i + 64), startPos: 0 })), count: false });
  const ms = run();
  for (let i = 0; i < B; i++) on.closeSequence(i);
  return { tokS: (1000 * B) / ms, msStep: ms };
}

function prefill(n: number): number {
  be.openSequence(0, n + 1);
  be.forward({ chunks: [{ seq: 0, tokens: prompt.slice(0, n), startPos: 0 }], count: false });
  be.closeSequence(0);
  be.openSequence(0, n + 1);
  const t = performance.now();
  be.forward({ chunks: [{ seq: 0, tokens: prompt.slice(0, n), startPos: 0 }], count: false });
  const sec = (performance.now() - t) / 1000;
  be.closeSequence(0);
  return n / sec;
}

// Run ahead (Backend.submit, what the engine does for greedy decode): step k + 1 is submitted, each row's token fed
// from step k's argmax on the device, before step k is waited for, so the host's work between steps overlaps the device's.
function decodeAhead(B: number, steps: number, on: SequenceBackend<CudaBackend> = be): { tokS: number; msStep: number } {
  return afterPrompts(on, B, steps, () => {
    const submit = (k: number) => on.submit({ chunks: Array.from({ length: B }, (_, i) => ({ seq: i, tokens: [k === 0 ? prompt[i]! : FED_TOKEN], startPos: 64 + k })), count: true, argmaxOnly: true });
    let pending = submit(0);
    let t = 0;
    for (let k = 1; k <= steps + 4; k++) {
      if (k === 4) t = performance.now();
      const next = submit(k);
      pending.wait();
      pending = next;
    }
    pending.wait();
    return (performance.now() - t) / (steps + 1);
  });
}

// The product's path: B greedy requests through the engine (schedule, sample, events, the loop's turn between
// steps), run ahead or step by step: the median wall time between the ends of consecutive decode steps.
async function engineDecode(B: number, steps: number, runAhead: boolean): Promise<{ tokS: number; msStep: number }> {
  const ends: number[] = [];
  const engine = createEngine(be, { runAhead, scheduler: { maxRunning: B }, onStep: (r) => { if (r.tokens === B) ends.push(performance.now()); } });
  await runToCompletion(engine, Array.from({ length: B }, (_, i) => ({ id: `b${i}`, promptIds: prompt.slice(i, i + 64), sampling: { temperature: 0, topP: 1, maxTokens: steps + 8, ignoreEos: true } })));
  await engine.close();
  const gaps = ends.slice(5, -1).map((t, i) => t - ends[4 + i]!).sort((a, b) => a - b);
  const mid = gaps[Math.floor(gaps.length / 2)]!;
  return { tokS: (1000 * B) / mid, msStep: mid };
}

const steps = Number(values.steps);
const dec = values.batches.split(',').map(Number).map((B) => ({ B, ...decode(B, steps) }));
const freshB1 = decode(1, steps, be, 'fresh');
// Step by step and run ahead alternated, twice each (a row measured first on a fresh machine reads slower).
const argmaxDec: { B: number; tokS: number; msStep: number }[] = [];
const aheadDec: { B: number; tokS: number; msStep: number }[] = [];
for (const B of [1, 4]) {
  for (let r = 0; r < 2; r++) {
    argmaxDec.push({ B, ...decode(B, steps, be, 'argmax') });
    aheadDec.push({ B, ...decodeAhead(B, steps) });
  }
}
const engineDec: { B: number; runAhead: boolean; tokS: number; msStep: number }[] = [];
for (const B of [1, 4]) for (const runAhead of [false, true, false, true]) engineDec.push({ B, runAhead, ...(await engineDecode(B, steps, runAhead)) });
const pre = [512, Math.min(2048, maxLen - 1)].map((n) => ({ n, tokS: prefill(n) }));

// Per-kernel device time of one batch-1 decode step at position 64, and the weight bytes each role reads.
be.openSequence(0, 128);
be.forward({ chunks: [{ seq: 0, tokens: prompt.slice(0, 64), startPos: 0 }], count: false });
const { launches: prof, stepUs, marginalUs, submittedUs } = be.profilePiece(planPieces([{ seq: 0, tokens: [prompt[64]!], startPos: 64 }], 2048, 16)[0]!);
be.closeSequence(0);
const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd, numExperts: E, topK: K, expertIntermediate: I, numLayers: L } = s;
// Weight bytes one launch of each role reads, as stored: bf16 2 bytes a value, block FP8 1 (plus its scale grids, ~0.1%).
const row = be.rowLayout;
const perRole: Record<string, number> = {
  router: E * H * 2, lm_head: V * H * 2,
  experts_gate_up: K * (row.gateUp.dataBytes + (row.gateUp.grid?.bytes ?? 0)), experts_down: K * (row.down.dataBytes + (row.down.grid?.bytes ?? 0)),
};
const ml = s.mla;
if (ml) {
  // Latent attention: q_a | kv_a, q_b, o; the absorb kernels read kv_b_proj's W_UK and W_UV halves.
  const a = mlaProducts(m.tensors, s, 0);
  Object.assign(perRole, { mla_a: productBytes(a.a), mla_q_b: productBytes(a.qB), o_proj: productBytes(a.o), mla_q_absorb: nh * ml.qkNopeDim * ml.kvLoraRank * 2, mla_o_absorb: nh * ml.vHeadDim * ml.kvLoraRank * 2 });
} else {
  const att = attentionProducts(m.tensors, s, 0);
  Object.assign(perRole, { qkv: productBytes(att.qkv), o_proj: productBytes(att.o) });
}
if (s.denseIntermediate) Object.assign(perRole, { mlp_gate_up: 2 * s.denseIntermediate * H * 2, mlp_down: H * s.denseIntermediate * 2 });
if (s.sharedIntermediate) Object.assign(perRole, { shared_gate_up: 2 * s.sharedIntermediate * H * 2, shared_down: H * s.sharedIntermediate * 2 });
const roles = new Map<string, { us: number; n: number }>();
for (const p of prof) {
  const r = roles.get(p.role) ?? { us: 0, n: 0 };
  r.us += p.us;
  r.n++;
  roles.set(p.role, r);
}
const deviceUs = prof.reduce((a, p) => a + p.us, 0);
be.dispose();

// --ab: the step's launch options one at a time, each on a fresh backend (same loaded model), the default first and
// last so drift shows: batch-1 / batch-4 decode and the batch-1 step graph's device time.
type Variant = Pick<CudaBackendOptions, 'tuning' | 'kernelDir'>;
const variants: [string, Variant][] = [
  ['default', {}], ['early weight loads off', { tuning: { earlyWeights: false } }], ['PDL off', { tuning: { pdl: false } }],
  ['evict-first weight loads off', { tuning: { evictFirst: false } }], ['fused residual off', { tuning: { fuseResidual: false } }],
  ['combining down product at 2 features a warp', { tuning: { combineRows: 2 } }], ['q|k|v at 2 features a warp (not one wave)', { tuning: { oneWaveDense: false } }],
  ['attention unsplit below 256 positions (no merge)', { tuning: { attendMinBlocks: 0 } }],
  // Kernels built another way beside dist/kernels (dist/kernels-NAME/step.fatbin and load.fatbin), for A/B.
  ...(existsSync('dist') ? readdirSync('dist') : []).filter((d) => d.startsWith('kernels-') && existsSync(join('dist', d, 'step.fatbin'))).map((d): [string, Variant] => [`kernels of dist/${d}`, { kernelDir: join('dist', d) }]),
  ['default (again)', {}],
];
const ab: { name: string; b1: number; b4: number; stepUs: number }[] = [];
if (values.ab) {
  for (const [name, o] of variants) {
    const v = bySequence(await createCuda(m, { maxModelLen: maxLen, maxNumSeqs: 16, ...o }));
    const b1 = decode(1, steps, v).tokS, b4 = decode(4, steps, v).tokS;
    v.openSequence(0, 128);
    v.forward({ chunks: [{ seq: 0, tokens: prompt.slice(0, 64), startPos: 0 }], count: false });
    const { stepUs: st } = v.profilePiece(planPieces([{ seq: 0, tokens: [prompt[64]!], startPos: 64 }], 2048, 16)[0]!);
    v.dispose();
    ab.push({ name, b1, b4, stepUs: st });
    process.stderr.write(`ab ${name}: b1 ${b1.toFixed(0)} b4 ${b4.toFixed(0)} step ${st.toFixed(1)} us\n`);
  }
}

const lines: string[] = [];
// "in the graph": the step's graph less the graph without the role's launches (profilePiece's marginalUs).
lines.push(`| kernel (batch-1 decode step, pos 64; device time in a graph) | launches | us / step | in the graph (us) | weight bytes / step | GB/s | share of ${HBM / 1e12} TB/s |`, '|---|---|---|---|---|---|---|');
for (const [role, r] of [...roles].sort((a, b) => b[1].us - a[1].us)) {
  const b = (perRole[role] ?? 0) * r.n;
  const gbs = b / (r.us / 1e6) / 1e9;
  lines.push(`| ${role} | ${r.n} | ${r.us.toFixed(1)} | ${(marginalUs[role] ?? NaN).toFixed(1)} | ${b ? (b / 1e6).toFixed(1) + ' MB' : '-'} | ${b ? gbs.toFixed(0) : '-'} | ${b ? ((100 * gbs * 1e9) / HBM).toFixed(0) + '%' : '-'} |`);
}
const marginalSum = Object.values(marginalUs).reduce((a, b) => a + b, 0);
lines.push(`| all kernels, each alone (sum) | ${prof.length} | ${deviceUs.toFixed(1)} | ${marginalSum.toFixed(1)} | | | |`);
lines.push(`| the step's graph (device time) | ${prof.length} | ${stepUs.toFixed(1)} | | ${(perRoleTotal() / 1e6).toFixed(0)} MB | ${(perRoleTotal() / (stepUs / 1e6) / 1e9).toFixed(0)} | ${((100 * perRoleTotal() / (stepUs / 1e6)) / HBM).toFixed(0)}% |`);
if (submittedUs !== undefined) lines.push(`| the decode graph as an argmax step submits it (rows in, the kernels, the argmax, its keys out; back to back) | | ${submittedUs.toFixed(1)} | | | | |`);
function perRoleTotal(): number {
  return prof.reduce((a, p) => a + (perRole[p.role] ?? 0), 0);
}
// llama.cpp's figures were measured on the qwen3-30b-a3b geometry only.
const peer = s.architecture === 'qwen3_moe' && H === 2048;
const table = [
  `# bench:gpu at real size: ${s.name} (${s.architecture}, ${L} layers${s.moeLayers ? ` (${s.moeLayers.length} MoE)` : ''}, hidden ${H}, ${E} experts of ${I}, top-${K}, ${ml ? `${nh} heads, latent attention (kv_lora ${ml.kvLoraRank})` : `${nh}/${nkv} heads of ${hd}`}), all experts in HBM`,
  `load: ${(bytes / 1e9).toFixed(2)} GB in ${loadS.toFixed(1)} s = ${(bytes / 1e9 / loadS).toFixed(2)} GB/s; peak host RSS ${rssGiB.toFixed(2)} GiB`,
  '',
  '| measure | ours | llama.cpp (issue 11) | ratio |', '|---|---|---|---|',
  ...dec.map((d) => `| decode batch ${d.B} (tok/s; ${d.msStep.toFixed(3)} ms/step) | ${d.tokS.toFixed(0)} | ${d.B === 1 && peer ? LLAMA.tg128 : '-'} | ${d.B === 1 && peer ? (d.tokS / LLAMA.tg128).toFixed(2) + 'x' : ''} |`),
  `| decode batch 1, a fresh logits array a step (no logitsInto; ${freshB1.msStep.toFixed(3)} ms/step) | ${freshB1.tokS.toFixed(0)} | | |`,
  ...argmaxDec.map((d) => `| decode batch ${d.B}, the argmax on the device (argmaxOnly; ${d.msStep.toFixed(3)} ms/step) | ${d.tokS.toFixed(0)} | | |`),
  ...aheadDec.map((d) => `| decode batch ${d.B}, run ahead (submit: tokens fed on the device, the engine's greedy decode; ${d.msStep.toFixed(3)} ms/step) | ${d.tokS.toFixed(0)} | ${d.B === 1 && peer ? LLAMA.tg128 : '-'} | ${d.B === 1 && peer ? (d.tokS / LLAMA.tg128).toFixed(2) + 'x' : ''} |`),
  ...engineDec.map((d) => `| decode batch ${d.B} through the engine, ${d.runAhead ? 'run ahead (default)' : 'step by step'} (median step ${d.msStep.toFixed(3)} ms) | ${d.tokS.toFixed(0)} | | |`),
  ...pre.map((p) => `| prefill ${p.n} tokens (tok/s) | ${p.tokS.toFixed(0)} | ${p.n === 512 && peer ? LLAMA.pp512 : '-'} | ${p.n === 512 && peer ? (p.tokS / LLAMA.pp512).toFixed(2) + 'x' : ''} |`),
  '',
  ...lines,
  ...(ab.length ? ['', '| variant (--ab) | decode b1 tok/s | b4 tok/s | b1 step graph (device us) |', '|---|---|---|---|', ...ab.map((a) => `| ${a.name} | ${a.b1.toFixed(0)} | ${a.b4.toFixed(0)} | ${a.stepUs.toFixed(1)} |`)] : []),
].join('\n');
console.log(table);
if (values.out) writeFileSync(join(values.out, 'bench-real.json'), JSON.stringify({ spec: s, loadS, bytes, rssGiB, dec, freshB1, argmaxDec, aheadDec, engineDec, pre, prof, stepUs, marginalUs, submittedUs, ab }, null, 1));
