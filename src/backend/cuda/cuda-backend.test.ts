// The CUDA backend without a GPU, on the fake driver (kernels are no-ops): memory planned before anything is
// allocated, the KV pool's limits, pieces planned and graphs keyed as documented, nothing left after dispose.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { familyCheckpoint, familyConfig } from '../../../fixtures/fixture-paths.ts';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectedTensors } from '../../model/architecture.ts';
import type { RawTensor } from '../../model/weights.ts';
import { mapTensorSource } from '../../model/tensor-source.ts';
import { syntheticModel } from '../cpu/synthetic.ts';
import { FakeCudaDriver } from './driver/fake-driver.ts';
import { KERNEL_GROUPS } from './driver/kernels.ts';
import { oneWaveFeatureBlocks, planPieces } from './step/plan.ts';
import { CudaBackend, type CudaBackendOptions } from './cuda-backend.ts';
import { bySequence } from '../sequences.ts';
import type { KernelTuning } from './tuning.ts';
import { memoryNeeds } from './memory/workspace.ts';
import { stepLayout } from './step/kernel-args.ts';
import { FED_TOKEN } from '../backend.ts';
import { deviceWeightBytes } from './weights/device-weights.ts';
import { DEVICE_SLACK_BYTES } from './memory/memory.ts';
import { DEFAULT_SPARE_ROWS } from '../move-pipeline.ts';

const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-op-'));
for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
after(() => rmSync(kernelDir, { recursive: true, force: true }));

// Shapes the kernels take (multiples of 32, head_dim 64, 2 query heads a kv head), 6 of 8 experts hot.
const { spec } = syntheticModel({ hiddenSize: 64, headDim: 64, numHeads: 2, numKvHeads: 1, expertIntermediate: 32, numExperts: 8, topK: 2, tieWordEmbeddings: false });
const raw = new Map<string, RawTensor>();
for (const [name, shape] of expectedTensors(spec)) raw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });

/** The decode graphs captured, by shape (each is captured once for each of the two pinned io sets it runs from). */
const graphShapes = (be: CudaBackend): string[] => [...new Set(be.graphKeys().map((k) => k.replace(/\/io[01]$/, '')))];

/** A backend on the fake driver, driven by sequence (its blocks handed out by DirectSequences), and the raw one. */
function build(opts: CudaBackendOptions = {}) {
  const d = new FakeCudaDriver();
  const raw0 = new CudaBackend(d, spec, mapTensorSource(raw), { kernelDir, placement: { hotPerLayer: 6 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32, ...opts });
  return { d, be: bySequence(raw0), raw: raw0 };
}

test('cuda backend on the fake driver: prefill in pieces, decode graphs by bucket, splits and attention kind; dispose leaves nothing', () => {
  const { d, be, raw: r } = build();
  be.openSequence(1, 64);
  be.openSequence(2, 16);
  assert.throws(() => be.forward({ chunks: [{ seq: 1, tokens: [1], startPos: 64 }], count: false }), /positions 64..64 are outside 0..63 \(--max-model-len\)/);
  // A sequence's table bounds it, not only --max-model-len (the conformance suite's bad step).
  assert.throws(() => be.forward({ chunks: [{ seq: 2, tokens: [1, 2], startPos: 15 }], count: false }), /seq 2 positions 15..16 need a blockTable of 2 blocks of 16 positions \(got 1\)/);
  assert.throws(() => r.forward({ chunks: [{ seq: 9, tokens: [1], startPos: 0 }], count: false }), /seq 9 positions 0..0 need a blockTable of 1 blocks/);
  // A 40-token prompt: a 32-row prefill piece (eager) then an 8-row piece of one sequence (unfused graph; 40 positions in 2 splits).
  const p = be.forward({ chunks: [{ seq: 1, tokens: Array.from({ length: 40 }, (_, i) => i % 50), startPos: 0 }], count: false });
  assert.equal(p.logits.length, spec.vocabSize);
  be.forward({ chunks: [{ seq: 1, tokens: [3], startPos: 40 }, { seq: 2, tokens: [4], startPos: 0 }], count: true, recordRouting: true });
  assert.deepEqual(graphShapes(be).sort(), ['2/2/fused', '8/2/unfused'].sort());
  be.closeSequence(2);
  be.openSequence(2, 64); // its blocks came back
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: with tensorCoreDecodeRows, decode buckets of that many rows take the tensor-core products and the prefill routing; smaller ones the gemv', () => {
  const { d, be } = build({ tuning: { tensorCoreDecodeRows: 8 } });
  for (let i = 0; i < 2; i++) be.openSequence(i, 64);
  let at = 0;
  const step = (rows: number): string[] => {
    const from = d.launches.length;
    // Two sequences, rows / 2 tokens each: one decode-sized piece of `rows` rows.
    be.forward({ chunks: [0, 1].map((seq) => ({ seq, tokens: Array.from({ length: rows / 2 }, () => 1), startPos: at })), count: false });
    at += rows / 2;
    return d.launches.slice(from).map((x) => x.name);
  };
  const small = step(2);
  assert.ok(small.includes('op_route_group') && small.some((n) => n.startsWith('op_gemv_')) && !small.some((n) => n.startsWith('op_gemm_tc_')));
  const large = step(8);
  assert.ok(large.includes('op_route_rows') && large.includes('op_group') && large.some((n) => n.startsWith('op_gemm_tc_')));
  assert.ok(!large.some((n) => n.startsWith('op_gemv_') && !n.endsWith('_store')), 'only the lm head stays a gemv');
  be.dispose();
  assert.throws(() => build({ tuning: { tensorCoreDecodeRows: -1 } }), /tuning.tensorCoreDecodeRows -1: expected an integer >= 0/);
});

test('cuda backend: a model that does not fit the budget is refused before any allocation, with what would fit', () => {
  const d = new FakeCudaDriver(); // 16 GiB
  assert.throws(() => new CudaBackend(d, { ...spec, maxPositions: 1 << 24 }, mapTensorSource(raw), { kernelDir, maxModelLen: 1 << 24, maxNumSeqs: 64 }),
    /does not fit the GPU memory budget.*KV cache of 67108864 positions.*; \d+ positions of KV cache would fit \(--kv-cache-tokens \d+/);
  assert.equal(d.acquisitions, 0);
});

test('cuda backend without --hot or --map: every expert hot when they fit, else as many per layer as fit the budget (hotReason says why)', () => {
  const all = build({ placement: undefined });
  assert.equal(all.be.banks.hotPerLayer, spec.numExperts);
  assert.match(all.be.hotReason, /all 8 experts per layer hot.*\(an expert: 0\.01 MiB, bf16 as stored\)$/);
  all.be.dispose();
  // A budget that holds exactly 3 hot rows per layer (plus the spare rows moves land in) beside the rest.
  const T = 32, seqs = 2, len = 64;
  const needAt = (h: number): number => {
    const n = memoryNeeds(spec, h + DEFAULT_SPARE_ROWS, T, 32, deviceWeightBytes(mapTensorSource(raw), spec), { blockSize: 16, dtype: 'bfloat16', maxBlocks: 4 });
    return n.weights + n.bytesPerBlock * Math.ceil((len * seqs) / 16) + n.workspace + DEVICE_SLACK_BYTES; // the pool's least: 64 positions x min(4, 2)
  };
  const util = (needAt(3) + 1) / 2 ** 34;
  const some = build({ placement: undefined, gpuMemoryUtilization: util });
  assert.equal(some.be.banks.hotPerLayer, 3);
  assert.match(some.be.hotReason, /^3 of 8 experts per layer hot: as many as fit/);
  some.be.dispose();
  assert.deepEqual(some.d.liveByKind(), {});
});

test('cuda backend, mixtral (fake driver): its own router and expert names, no q/k norms; other families refused by name', async () => {
  const { readFileSync } = await import('node:fs');
  const { parseConfig } = await import('../../model/config.ts');
  const { checkCudaSupport } = await import('./support.ts');
  const cfg = JSON.parse(readFileSync(familyConfig('mixtral-tiny'), 'utf8'));
  // The fixture's head_dim of 32 is one the attention kernels take; 16 is not.
  assert.doesNotThrow(() => checkCudaSupport(parseConfig(cfg, 'mixtral-tiny')));
  assert.throws(() => checkCudaSupport(parseConfig({ ...cfg, head_dim: 16 }, 'mixtral-16')), /head_dim 16 \(the attention kernels take 32, 64 or 128\)/);
  const mx = parseConfig({ ...cfg, head_dim: 64, hidden_size: 128, intermediate_size: 64 }, 'mixtral-64');
  const mraw = new Map<string, RawTensor>();
  for (const [name, shape] of expectedTensors(mx)) mraw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });
  assert.ok([...mraw.keys()].some((n) => n.endsWith('block_sparse_moe.experts.7.w3.weight')));
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, mx, mapTensorSource(mraw), { kernelDir, placement: { hotPerLayer: 6 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32 }));
  be.openSequence(0, 32);
  be.forward({ chunks: [{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i), startPos: 0 }], count: true });
  be.forward({ chunks: [{ seq: 0, tokens: [7], startPos: 20 }], count: true });
  assert.equal(be.banks.hotPerLayer, 6);
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
  // What the latent attention kernels do not take is refused by name.
  const ds = JSON.parse(readFileSync(familyConfig('deepseek-v3-tiny'), 'utf8'));
  assert.doesNotThrow(() => checkCudaSupport(parseConfig(ds, 'ds')));
  assert.throws(() => checkCudaSupport(parseConfig({ ...ds, kv_lora_rank: 1024 }, 'ds')), /kv_lora_rank 1024 \(the latent attention kernels take a multiple of 32, at most 512\)/);
  assert.throws(() => checkCudaSupport(parseConfig({ ...ds, q_lora_rank: 48 }, 'ds')), /q_lora_rank 48 is not a multiple of 32/);
  assert.throws(() => checkCudaSupport(parseConfig({ ...ds, n_routed_experts: 256, n_group: 64, topk_group: 8 }, 'ds')), /n_group 64 \(the routing kernel scores at most 32 groups\)/);
});

test('cuda backend, deepseek-v3 (fake driver): latent attention launches, dense layer 0 with its MLP, shared expert, group router; banks and counter for the MoE layers only', async () => {
  const { loadModelFor } = await import('../load-for.ts');
  const dir = familyCheckpoint('deepseek-v3-tiny');
  const m = await loadModelFor(dir, 'cuda');
  const s = m.spec;
  assert.deepEqual(s.moeLayers, [1, 2, 3]);
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, s, m.tensors, { kernelDir, placement: { hotPerLayer: 16 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32 }));
  try {
    assert.equal(be.banks.hotDev.length, 3);
    be.openSequence(0, 40);
    const p = be.forward({ chunks: [{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 0 }], count: true, recordRouting: true });
    assert.equal(p.routing!.length, 20 * 3 * s.topK); // routing of the MoE layers only
    be.forward({ chunks: [{ seq: 0, tokens: [7], startPos: 20 }], count: true });
    assert.equal(be.readCounter().length, 3 * s.numExperts);
    const names = d.launches.map((x) => x.name);
    // Per layer and step: q_a | kv_a, norms + RoPE + cache, q_b, absorb, attend, values, o_proj; no q | k | v attention.
    for (const k of ['op_mla_norm_rope_kv', 'op_mla_q_absorb', 'op_mla_attend', 'op_mla_o_absorb']) assert.equal(names.filter((n) => n === k).length, 2 * s.numLayers, k);
    assert.ok(!names.some((n) => /^op_(attend|qk_rope_kv)/.test(n)));
    const mla = d.launches.filter((x) => x.name === 'op_mla_attend');
    assert.deepEqual(mla[0]!.grid, [20, 4, 1]); // a block per (row, head)
    const absorb = d.launches.find((x) => x.name === 'op_mla_q_absorb')!;
    assert.deepEqual(absorb.grid, [4, 3, 1]); // heads x ceil(20 rows / 8)
    // Routing runs on the 3 MoE layers only (prefill: route rows + group; decode: route + group in one).
    assert.equal(names.filter((n) => n === 'op_route_rows').length, 3);
    assert.equal(names.filter((n) => n === 'op_route_group').length, 3);
  } finally {
    be.dispose();
    m.tensors.close();
  }
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend, deepseek-v3 in block FP8 (fake driver): every linear but the router as stored, the absorb kernels reading kv_b_proj in FP8', async () => {
  const { readFileSync } = await import('node:fs');
  const { parseConfig } = await import('../../model/config.ts');
  const cfg = JSON.parse(readFileSync(familyConfig('deepseek-v3-tiny'), 'utf8'));
  const s = parseConfig({ ...cfg, quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] } }, 'ds-fp8');
  assert.equal(s.quantization?.method, 'fp8');
  // As make-checkpoint --format fp8 stores it: F8_E4M3 values and a float32 weight_scale_inv per [128, 128] block.
  const fraw = new Map<string, RawTensor>();
  for (const [name, shape] of expectedTensors(s)) {
    const fp8 = shape.length === 2 && !/norm|embed_tokens|lm_head|mlp\.gate\.weight/.test(name);
    const n = shape.reduce((a, b) => a * b, 1);
    fraw.set(name, { name, dtype: fp8 ? 'F8_E4M3' : 'BF16', shape, bytes: new Uint8Array(fp8 ? n : 2 * n) });
    if (fp8) {
      const sShape = [Math.ceil(shape[0]! / 128), Math.ceil(shape[1]! / 128)];
      const scale = `${name.slice(0, -'weight'.length)}weight_scale_inv`;
      fraw.set(scale, { name: scale, dtype: 'F32', shape: sShape, bytes: new Uint8Array(new Float32Array(sShape[0]! * sShape[1]!).fill(1).buffer) });
    }
  }
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, s, mapTensorSource(fraw, s.quantization), { kernelDir, placement: { hotPerLayer: 16 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32 }));
  try {
    assert.equal(be.rowLayout.format, 'fp8');
    be.openSequence(0, 40);
    be.forward({ chunks: [{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 0 }], count: true });
    be.forward({ chunks: [{ seq: 0, tokens: [7], startPos: 20 }], count: true });
    const names = d.launches.map((x) => x.name);
    assert.equal(names.filter((n) => n === 'op_mla_q_absorb_fp8').length, 2 * s.numLayers);
    assert.equal(names.filter((n) => n === 'op_mla_o_absorb_fp8').length, 2 * s.numLayers);
    assert.ok(!names.includes('op_mla_q_absorb'));
    // The dense MLP, the shared expert and the routed experts all take the FP8 products.
    assert.ok(names.includes('op_gemm_tc_fp8_swiglu') && names.some((n) => n.startsWith('op_gemv_fp8_')));
  } finally {
    be.dispose();
  }
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend, olmoe (fake driver): q and k normed over the whole projections in their own launch, before attention with no per-head norm', async () => {
  const { loadModelFor } = await import('../load-for.ts');
  const dir = familyCheckpoint('olmoe-tiny');
  const m = await loadModelFor(dir, 'cuda');
  assert.equal(m.spec.qkNorm, 'whole');
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, m.spec, m.tensors, { kernelDir, placement: { hotPerLayer: 20 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32 }));
  try {
    be.openSequence(0, 40);
    be.forward({ chunks: [{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 0 }], count: true });
    be.forward({ chunks: [{ seq: 0, tokens: [7], startPos: 20 }], count: true });
    const norms = d.launches.filter((x) => x.name === 'op_qk_norm_whole');
    assert.equal(norms.length, 2 * m.spec.numLayers); // each layer, prefill and decode (eager: graphs record into launches too)
    assert.deepEqual(norms[0]!.grid, [20, 2, 1]);
    const names = d.launches.map((x) => x.name);
    // Every whole norm comes right after its layer's q/k/v product and before its attention.
    names.forEach((n, i) => { if (n === 'op_qk_norm_whole') assert.match(names[i + 1]!, /^op_(qk_rope_kv|attend_decode_hd32_g1)$/); });
  } finally {
    be.dispose();
    m.tensors.close();
  }
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: dense gemvs and the expert down gemv launched with PDL issue their first weight loads early (GemmProblem.early); gate/up (its groups from the kernel just before) and earlyWeights: false do not; every gemv\'s loads are evict-first (GemmProblem.l2) unless evictFirst: false', () => {
  // Each decode gemv's GemmProblem int32 at byte `at` (248: early, 252: l2), by kernel ('down': the expert down product).
  const gemvFieldOf = (tuning: Partial<KernelTuning>, at = 248): Map<string, number[]> => {
    const { d, be } = build({ tuning: { graphs: false, ...tuning } });
    be.openSequence(0, 64);
    be.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0 }], count: false });
    const from = d.launches.length;
    be.forward({ chunks: [{ seq: 0, tokens: [3], startPos: 3 }], count: true });
    const out = new Map<string, number[]>();
    for (const l of d.launches.slice(from)) {
      if (!l.name.startsWith('op_gemv_')) continue;
      const bytes = Buffer.from((l.args[0] as { bytes: Uint8Array }).bytes);
      // The expert down products: grouped (grp_n set, GemmProblem byte 32) stores, or batch 1's combining product.
      const name = l.name.endsWith('_combine') || (l.name.endsWith('_store') && bytes.readBigUInt64LE(32) !== 0n) ? 'down' : l.name;
      out.set(name, [...(out.get(name) ?? []), bytes.readInt32LE(at)]);
    }
    be.dispose();
    return out;
  };
  const on = gemvFieldOf({});
  // Per layer: q | k | v and the router (dense, early), gate/up and down (grouped); then the lm head (dense).
  const flags = [...on.values()].flat();
  assert.ok(flags.includes(1) && flags.includes(0));
  assert.ok(on.get('op_gemv_b1_r1_swiglu')!.every((f) => f === 0), 'expert gate/up (grouped, its groups from the kernel just before) waits first');
  assert.ok(on.get('down')!.length > 0 && on.get('down')!.every((f) => f === 1), 'expert down (its groups from before gate/up) loads early');
  assert.ok([...gemvFieldOf({ earlyWeights: false }).values()].flat().every((f) => f === 0));
  // Every decode gemv's weight loads are evict-first (GemmProblem.l2, byte 252: L2_EVICT_FIRST) unless switched off.
  assert.ok([...gemvFieldOf({}, 252).values()].flat().every((f) => f === 1));
  assert.ok([...gemvFieldOf({ evictFirst: false }, 252).values()].flat().every((f) => f === 0));
});

test('cuda backend: at batch 1 the expert down product adds its picks to hidden (op_gemv_b1_r*_combine: a warp a pick, this layer\'s pick weights and slots) and the next input norm runs in the q|k|v gemv: residual+norm only for layer 0 and the final norm; batch 2 and fuseResidual: false keep one a layer', () => {
  const L = spec.numLayers, K = spec.topK, H = spec.hiddenSize;
  const decode = (tuning: Partial<KernelTuning>, rows: number) => {
    const { d, be } = build({ tuning: { graphs: false, ...tuning } });
    for (let i = 0; i < rows; i++) be.openSequence(i, 64);
    be.forward({ chunks: Array.from({ length: rows }, (_, seq) => ({ seq, tokens: [1, 2], startPos: 0 })), count: false });
    const from = d.launches.length;
    be.forward({ chunks: Array.from({ length: rows }, (_, seq) => ({ seq, tokens: [3], startPos: 2 })), count: true });
    const launches = d.launches.slice(from);
    be.dispose();
    const gemm = (l: (typeof launches)[number]): Buffer => Buffer.from((l.args[0] as { bytes: Uint8Array }).bytes);
    return { launches, gemm, count: (re: RegExp): number => launches.filter((l) => re.test(l.name)).length };
  };
  const fused = decode({}, 1);
  assert.equal(fused.count(/^op_residual_norm$/), 2, 'layer 0 (the embedding) and the final norm');
  const combines = fused.launches.filter((l) => /^op_gemv_b1_r[124]_combine$/.test(l.name));
  assert.equal(combines.length, L);
  const pickW = combines.map((l) => fused.gemm(l).readBigUInt64LE(64));
  combines.forEach((l, m) => {
    const g = fused.gemm(l);
    const R = Number(l.name.match(/_r(\d)_/)![1]);
    assert.equal(l.block, 32 * K, 'a warp a pick');
    assert.deepEqual(l.grid, [Math.ceil(H / R), 1, 1]);
    assert.equal(g.readInt32LE(128 + 16), K, 'rows: the picks');
    assert.equal(g.readBigUInt64LE(8), g.readBigUInt64LE(16), 'y is the residual it adds to');
    assert.equal(pickW[m]! - pickW[0]!, BigInt(4 * m * K), 'this MoE layer\'s pick weights');
    assert.equal(g.readBigUInt64LE(40), fused.gemm(combines[0]!).readBigUInt64LE(40), 'every layer reads the routing\'s pick slots');
  });
  // q|k|v of layers 1.. stage hidden and normalize it (norm_w, byte 160), writing no xn (norm_out, byte 168).
  const qkvs = fused.launches.filter((l) => /^op_gemv_b1_r[12]_store$/.test(l.name) && fused.gemm(l).readInt32LE(136) === 2 * 64 + 2 * 64 && fused.gemm(l).readBigUInt64LE(32) === 0n);
  assert.equal(qkvs.length, L);
  assert.equal(fused.gemm(qkvs[0]!).readBigUInt64LE(160), 0n, 'layer 0: after the embedding\'s launch');
  for (const q of qkvs.slice(1)) {
    assert.notEqual(fused.gemm(q).readBigUInt64LE(160), 0n);
    assert.equal(fused.gemm(q).readBigUInt64LE(168), 0n);
    assert.equal(fused.gemm(q).readBigUInt64LE(0), combines[0] && fused.gemm(combines[0]).readBigUInt64LE(16), 'x is hidden');
  }
  for (const [opts, rows] of [[{ fuseResidual: false }, 1], [{}, 2]] as const) {
    const plain = decode(opts, rows);
    assert.equal(plain.count(/^op_residual_norm$/), L + 1);
    assert.equal(plain.count(/_combine$/), 0);
  }
});

test('cuda backend: profilePiece times each launch and the kernels as one graph, and a decode piece\'s graph as an argmax step submits it (rows in, argmax, keys out); a prefill piece has no such graph', () => {
  const { d, be } = build();
  be.openSequence(0, 64);
  be.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0 }], count: false });
  const decode = be.profilePiece(planPieces([{ seq: 0, tokens: [4], startPos: 3 }], 32, 16)[0]!, 2);
  assert.ok(decode.launches.some((l) => l.role === 'experts_down') && decode.launches.every((l) => Number.isFinite(l.us)));
  // Each role's cost in the graph (the step graph less the graph without it): one entry a role, a number (the fake
  // driver's clock makes it no particular value; on a device it is a difference of two timings, so noise can be < 0).
  assert.deepEqual(Object.keys(decode.marginalUs).sort(), [...new Set(decode.launches.map((l) => l.role))].sort());
  assert.ok(Object.values(decode.marginalUs).every(Number.isFinite));
  assert.ok(Number.isFinite(decode.stepUs) && decode.submittedUs !== undefined && Number.isFinite(decode.submittedUs));
  assert.ok(be.graphKeys().some((k) => k.includes('/argmax/')), 'the argmax decode graph a step submits');
  const prefill = be.profilePiece(planPieces([{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 4 }], 32, 16)[0]!, 2);
  assert.equal(prefill.submittedUs, undefined);
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

// Wide enough that one wave of the fake device's 16 blocks (4 SMs) is more blocks than 2 features a warp for q | k | v (192
// features: 16, not 12).
const { spec: evenSpec } = syntheticModel({ hiddenSize: 64, headDim: 32, numHeads: 4, numKvHeads: 1, expertIntermediate: 64, numExperts: 8, topK: 2, tieWordEmbeddings: false });
const evenRaw = new Map<string, RawTensor>();
for (const [name, shape] of expectedTensors(evenSpec)) evenRaw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });

/** A batch-1 decode step's gemv launches (eager) with `opts`. */
function batch1Gemvs(tuning: Partial<KernelTuning>) {
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, evenSpec, mapTensorSource(evenRaw), { kernelDir, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32, tuning: { graphs: false, ...tuning } }));
  be.openSequence(0, 64);
  be.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0 }], count: false });
  const from = d.launches.length;
  be.forward({ chunks: [{ seq: 0, tokens: [3], startPos: 3 }], count: true });
  const launches = d.launches.slice(from).filter((l) => l.name.startsWith('op_gemv_b1_'));
  be.dispose();
  return { launches, sm: d.smCount };
}
const rowsOf = (name: string): number => Number(name.match(/_r(\d)_/)![1]);

test('cuda backend: with oneWaveDense (the default) the batch-1 q | k | v gemv splits its features evenly (op_gemv_b1_r*_store_even) where one wave is more blocks; other products keep R a warp', () => {
  const on = batch1Gemvs({});
  const O = (evenSpec.numHeads + 2 * evenSpec.numKvHeads) * evenSpec.headDim;
  const even = on.launches.filter((l) => l.name.endsWith('_even'));
  assert.equal(even.length, evenSpec.numLayers, on.launches.map((l) => l.name).join());
  for (const l of even) {
    assert.ok(l.name.endsWith('_store_even'), l.name); // q | k | v only: the expert gate/up and the rest keep R a warp
    assert.deepEqual(l.grid, [oneWaveFeatureBlocks(O, 1, rowsOf(l.name), on.sm), 1, 1]);
    assert.ok(l.grid[0] > Math.ceil(O / (8 * rowsOf(l.name))));
  }
  assert.equal(batch1Gemvs({ oneWaveDense: false }).launches.filter((l) => l.name.endsWith('_even')).length, 0);
});

test('cuda backend: argmaxOnly takes each chunk\'s argmax on the device (op_argmax_rows), its keys written to mapped host memory by the kernel (decode) or copied (prefill), not the logits; its decode graphs are their own', () => {
  const { d, be } = build();
  for (let i = 0; i < 2; i++) be.openSequence(i, 64);
  const prompt = be.forward({ chunks: [0, 1].map((seq) => ({ seq, tokens: [1, 2, 3], startPos: 0 })), count: false, argmaxOnly: true });
  assert.equal(prompt.logits.length, 0);
  assert.deepEqual(Array.from(prompt.argmax!), [0, 0], 'the fake driver\'s keys are all zero: no key, token 0');
  const from = d.launches.length, copies = d.dtohBytes.length;
  const step = be.forward({ chunks: [0, 1].map((seq) => ({ seq, tokens: [4], startPos: 3 })), count: true, argmaxOnly: true });
  assert.equal(step.argmax!.length, 2);
  assert.ok(graphShapes(be).includes('2/1/fused/argmax'));
  // No copy out: op_argmax_rows writes the bucket's 2 rows of 32 keys into the io set's mapped keys itself; no logits.
  assert.deepEqual(d.dtohBytes.slice(copies), []);
  const argmaxLaunches = d.launches.slice(from).filter((l) => l.name === 'op_argmax_rows');
  assert.deepEqual(argmaxLaunches.map((l) => l.grid), [[32, 2, 1]]);
  assert.ok(argmaxLaunches.every((l) => (l.args[3] as { u64: bigint }).u64 !== 0n), 'a host address for the keys');
  be.forward({ chunks: [0, 1].map((seq) => ({ seq, tokens: [5], startPos: 4 })), count: true });
  assert.ok(graphShapes(be).includes('2/1/fused'), 'a logits step captures its own graph');
  assert.ok(d.launches.slice(from).some((l) => l.name === 'op_argmax_rows'));
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: submit returns before the step completes; a fed token is the row of its sequence in the argmax step just before (-1 - row), refused otherwise', () => {
  const { d, be } = build({ tuning: { graphs: false } });
  for (let i = 0; i < 2; i++) be.openSequence(i, 64);
  const tokenField = (rows: number): number[] => {
    const c = d.htodCarried[d.htodCarried.length - 1]!.bytes;
    const o = stepLayout(rows, 4);
    return Array.from({ length: rows }, (_, i) => new DataView(c.buffer, c.byteOffset).getInt32(o.token + 4 * i, true));
  };
  // 18 rows: a prefill piece, whose keys are not kept by row: nothing to feed from (a decode piece's are: below).
  be.forward({ chunks: [0, 1].map((seq) => ({ seq, tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9], startPos: 0 })), count: false, argmaxOnly: true });
  assert.throws(() => be.submit({ chunks: [{ seq: 0, tokens: [FED_TOKEN], startPos: 9 }], count: true, argmaxOnly: true }), /seq 0 has a fed token .*not an argmaxOnly step/);
  let waits = 0;
  const [eventSync, streamSync] = [d.eventSync.bind(d), d.streamSync.bind(d)];
  d.eventSync = (e) => void (waits++, eventSync(e));
  d.streamSync = (st, what) => void (waits++, streamSync(st, what));
  const first = be.submit({ chunks: [1, 0].map((seq) => ({ seq, tokens: [7 + seq], startPos: 9 })), count: true, argmaxOnly: true });
  assert.deepEqual(tokenField(2), [8, 7]);
  // The next step feeds both: seq 0 sat in row 1, seq 1 in row 0; submitted before the first is waited for.
  const second = be.submit({ chunks: [0, 1].map((seq) => ({ seq, tokens: [FED_TOKEN], startPos: 10 })), count: true, argmaxOnly: true });
  assert.deepEqual(tokenField(2), [-1 - 1, -1 - 0]);
  assert.equal(waits, 0, 'neither submit waited for the device');
  assert.equal(first.wait().argmax!.length, 2);
  assert.equal(second.wait().argmax!.length, 2);
  assert.equal(waits, 2, 'each wait() waits for its own event');
  // Only from the step just before: a logits step in between forgets the rows.
  be.forward({ chunks: [{ seq: 0, tokens: [4], startPos: 11 }], count: false });
  assert.throws(() => be.forward({ chunks: [{ seq: 0, tokens: [FED_TOKEN], startPos: 12 }], count: false, argmaxOnly: true }), /seq 0 has a fed token/);
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: fed tokens of a step in several pieces are read back and given as tokens (no piece feeds from keys an earlier one overwrote)', () => {
  const { d, be } = build({ tuning: { graphs: false }, maxNumSeqs: 17 });
  for (let i = 0; i < 17; i++) be.openSequence(i, 64);
  be.forward({ chunks: Array.from({ length: 16 }, (_, seq) => ({ seq, tokens: [seq + 1], startPos: 0 })), count: false, argmaxOnly: true });
  const from = d.htodCarried.length;
  // 17 outputs: two pieces (16 outputs at most a piece).
  const out = be.forward({ chunks: [...Array.from({ length: 16 }, (_, seq) => ({ seq, tokens: [FED_TOKEN], startPos: 1 })), { seq: 16, tokens: [3, 4], startPos: 0 }], count: false, argmaxOnly: true });
  assert.equal(out.argmax!.length, 17);
  const carried = d.htodCarried.slice(from);
  assert.equal(carried.length, 2, 'two pieces');
  for (const c of carried) {
    const view = new DataView(c.bytes.buffer, c.bytes.byteOffset);
    const rows = view.getInt32(0, true);
    const T = [1, 2, 4, 8, 16].find((b) => b >= rows)!; // decode pieces, padded to their bucket
    for (let i = 0; i < rows; i++) assert.ok(view.getInt32(stepLayout(T, 4).token + 4 * i, true) >= 0, 'no fed (negative) token in a piece');
  }
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: a decode bucket whose routing needs over 48 KiB of shared memory (704 experts, 16 rows on the gemv) launches: the function\'s limit is raised first', () => {
  const { spec: wide } = syntheticModel({ hiddenSize: 64, headDim: 64, numHeads: 2, numKvHeads: 1, expertIntermediate: 32, numExperts: 704, topK: 2, tieWordEmbeddings: false });
  const wideRaw = new Map<string, RawTensor>();
  for (const [name, shape] of expectedTensors(wide)) wideRaw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, wide, mapTensorSource(wideRaw), { kernelDir, maxModelLen: 16, maxNumSeqs: 16, maxPieceRows: 32, tuning: { tensorCoreDecodeRows: 0 } }));
  for (let i = 0; i < 16; i++) be.openSequence(i, 16);
  be.forward({ chunks: Array.from({ length: 16 }, (_, i) => ({ seq: i, tokens: [i + 1], startPos: 0 })), count: true });
  assert.ok(d.launches.some((l) => l.name === 'op_route_group'));
  be.dispose();
  assert.deepEqual(d.liveByKind(), {});
});

test('cuda backend: the paged KV pool: bf16 by default, a block every layer\'s k and v of its positions; a fixed size, or what the budget leaves', () => {
  const { be, raw: r } = build({ kvCache: { tokens: 96 } }); // 6 blocks of 16
  const width = 2 * spec.numKvHeads * spec.headDim;
  assert.deepEqual(r.kvCache, { blockSize: 16, numBlocks: 6, dtype: 'bfloat16', bytesPerBlock: spec.numLayers * 16 * width * 2 });
  assert.match(r.kvReason, /^96 positions .*bfloat16; 1\.5 sequences at --max-model-len 64\): the size asked for/);
  be.dispose();
  const f = build({ kvCache: { blockSize: 8, dtype: 'fp8', bytes: 8 * spec.numLayers * 8 * width } });
  assert.deepEqual(f.raw.kvCache, { blockSize: 8, numBlocks: 8, dtype: 'fp8', bytesPerBlock: spec.numLayers * 8 * width });
  f.be.dispose();
  // Without a size the pool takes what the weights, the bank and the workspace leave (the fake device has 16 GiB).
  const big = build();
  assert.ok(big.raw.kvCache.numBlocks * big.raw.kvCache.bytesPerBlock > 10 * 2 ** 30, `${big.raw.kvCache.numBlocks} blocks`);
  assert.match(big.raw.kvReason, /what the weights, the hot bank and the workspace leave of the 14\.4 GiB budget/);
  big.be.dispose();
  assert.throws(() => build({ kvCache: { tokens: 32 } }), /holds less than one sequence at --max-model-len 64/);
  assert.throws(() => build({ kvCache: { blockSize: 0 } }), /--block-size 0: expected an integer in 1\.\.1024/);
});

test('cuda backend: a step\'s rows carry each sequence\'s block table (the blocks its positions read), padding rows the scratch block', () => {
  const { d, raw: r } = build({ kvCache: { tokens: 96 } });
  const o = stepLayout(2, 4); // decode bucket 2, --max-model-len 64 = 4 blocks a table
  r.forward({ chunks: [{ seq: 7, tokens: [1, 2, 3], startPos: 0, blockTable: [5] }], count: false });
  // One decode row of seq 7 at position 17 (its second block: 2) and one of seq 9 at 0: bucket 2, no padding.
  r.forward({ chunks: [{ seq: 7, tokens: [4], startPos: 17, blockTable: [5, 2] }, { seq: 9, tokens: [4], startPos: 0, blockTable: [3] }], count: true });
  const c = d.htodCarried[d.htodCarried.length - 1]!.bytes;
  const v = new DataView(c.buffer, c.byteOffset, c.byteLength);
  const table = (row: number): number[] => {
    const at = Number(v.getBigUint64(o.table + 8 * row, true) - d.htodCarried[d.htodCarried.length - 1]!.dst);
    return [0, 1].map((j) => v.getInt32(at + 4 * j, true));
  };
  assert.deepEqual(table(0), [5, 2]);
  assert.equal(table(1)[0], 3);
  // A decode row alone pads to bucket 1: no padding; three rows pad to 4: the fourth reads the scratch block, past the pool.
  r.forward({ chunks: [0, 1, 2].map((seq) => ({ seq, tokens: [1], startPos: 0, blockTable: [seq] })), count: false });
  const c4 = d.htodCarried[d.htodCarried.length - 1]!;
  const v4 = new DataView(c4.bytes.buffer, c4.bytes.byteOffset, c4.bytes.byteLength);
  const o4 = stepLayout(4, 4);
  const pad = Number(v4.getBigUint64(o4.table + 8 * 3, true) - c4.dst);
  assert.equal(v4.getInt32(pad, true), 6, 'the scratch block: one past the pool\'s 6');
  r.dispose();
});

test('cuda backend: copyBlocks copies a block\'s bytes (every layer) on the compute stream; a block outside the pool is refused', () => {
  const { d, raw: r } = build({ kvCache: { tokens: 96 } });
  const before = d.copies.length;
  r.copyBlocks([[1, 4], [0, 2]]);
  const got = d.copies.slice(before);
  const bpb = r.kvCache.bytesPerBlock;
  assert.equal(got.length, 2);
  assert.deepEqual(got.map((x) => [Number(x.dst - got[0]!.dst + BigInt(4 * bpb)) / bpb, Number(x.src - got[0]!.dst + BigInt(4 * bpb)) / bpb, x.bytes]), [[4, 1, bpb], [2, 0, bpb]]);
  assert.equal(got[0]!.stream, r.stream);
  assert.throws(() => r.copyBlocks([[0, 6]]), /copyBlocks: block 6 is not in \[0, 6\)/);
  r.dispose();
  assert.deepEqual(d.liveByKind(), {});
});
