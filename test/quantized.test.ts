// The quantized fixtures end to end on the CPU side: the stored format exposed in the tensor description
// (what a GPU backend uploads), the CUDA backend refusing them by name before touching a device, and the
// host memory of the FP8 fixture against a float32 copy of its weights (both printed).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openCheckpoint, readCheckpoint } from '../src/model/checkpoint.ts';
import { encodeSafetensors, type TensorToWrite } from '../src/model/safetensors-writer.ts';
import { rejectsWith, withTempDir } from '../src/model/test-helpers.ts';
import { loadModel } from '../src/model/load.ts';
import { loadModelFor } from '../src/backend/load-for.ts';
import { createCpuBackend } from '../src/backend/cpu/cpu-backend.ts';
import { float32Bytes, heldBytes } from '../src/model/weight-bytes.ts';
import type { Fp8Matrix, Mxfp4Matrix } from '../src/model/quant.ts';
import { checkCudaSupport } from '../src/backend/cuda/support.ts';
import { CudaBackend } from '../src/backend/cuda/cuda-backend.ts';
import { FakeCudaDriver } from '../src/backend/cuda/driver/fake-driver.ts';
import { KERNEL_GROUPS } from '../src/backend/cuda/driver/kernels.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { bySequence, type SequenceBackend } from '../src/backend/sequences.ts';
import { familyCheckpoint } from '../fixtures/fixture-paths.ts';

const FP8 = familyCheckpoint('qwen3-moe-fp8-tiny');
const MXFP4 = familyCheckpoint('gpt-oss-tiny-mxfp4');
const MiB = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;

describe('qwen3-moe-fp8-tiny', () => {
  it('the tensor description carries the stored format: data, scales and block shape; bf16 tensors as before', async () => {
    const [stream, full] = await Promise.all([loadModel(FP8, { stream: true }), loadModel(FP8, { raw: false })]);
    try {
      const name = 'model.layers.2.mlp.experts.5.up_proj.weight';
      const info = stream.tensors.info(name);
      assert.deepEqual(info.quant, { format: 'fp8', matrices: 1, rows: 256, cols: 256, data: name, scales: `${name}_scale_inv`, block: [128, 128] });
      const m = full.weights.layers[2]!.experts[5]!.up as Fp8Matrix;
      const data = new Uint8Array(info.bytes);
      stream.tensors.read(name, data);
      assert.deepEqual(data, m.data);
      const s = stream.tensors.info(info.quant!.scales);
      assert.deepEqual([s.dtype, ...s.shape], ['F32', 2, 2]);
      const scales = new Uint8Array(s.bytes);
      stream.tensors.read(s.name, scales);
      assert.deepEqual(new Float32Array(scales.buffer), m.scales);
      assert.equal(stream.tensors.info('model.layers.2.self_attn.q_proj.weight').quant?.format, 'fp8');
      for (const plain of ['model.embed_tokens.weight', 'model.layers.2.mlp.gate.weight', `${name}_scale_inv`]) {
        assert.equal(stream.tensors.info(plain).quant, undefined, plain);
      }
      assert.equal(stream.tensors.info('lm_head.weight').dtype, 'BF16');
    } finally {
      stream.tensors.close();
    }
  });

  it('CUDA takes it; an FP8 model whose experts are not a multiple of 32 wide is refused by name (FP8 blocks cannot be padded)', async () => {
    const { spec } = await loadModel(FP8, { stream: true });
    assert.doesNotThrow(() => checkCudaSupport(spec));
    assert.throws(() => checkCudaSupport({ ...spec, expertIntermediate: 48 }), /cuda backend: moe_intermediate_size 48 is not a multiple of 32; use --backend cpu/);
  });

  it('CUDA (fake driver): experts banked as stored, e4m3 bytes then scale grids; FP8 kernels for the FP8 products only', async () => {
    const m = await loadModelFor(FP8, 'cuda');
    await withFakeOpBackend(m, (be, d) => {
      const { hiddenSize: H, expertIntermediate: I } = m.spec;
      const row = be.rowLayout;
      assert.equal(row.format, 'fp8');
      assert.equal(be.banks.rowBytes, 3 * I * H + 4 * (4 * 2 + 2 * 2)); // 256 x 256 matrices: grids of 4 x 2 (gate | up) and 2 x 2 (down)
      // Layer 1's first cold row holds its expert's stored bytes and its scales, exactly.
      const e = be.banks.expertAt(1, 'cold', 0);
      const host = be.banks.coldRowBytes(1, 0);
      const read = (name: string): Uint8Array => { const t = m.tensors.info(name); const b = new Uint8Array(t.bytes); m.tensors.read(name, b); return b; };
      const n = `model.layers.1.mlp.experts.${e}`;
      assert.deepEqual(host.subarray(0, I * H), read(`${n}.gate_proj.weight`));
      assert.deepEqual(host.subarray(2 * I * H, 3 * I * H), read(`${n}.down_proj.weight`));
      const grid = new Float32Array(host.slice(row.gateUpGridAt, row.gateUpGridAt + 4 * 8).buffer);
      assert.deepEqual(Array.from(grid.subarray(0, 4)), Array.from(new Float32Array(read(`${n}.gate_proj.weight_scale_inv`).buffer)));
      assert.deepEqual(Array.from(grid.subarray(4, 8)), Array.from(new Float32Array(read(`${n}.up_proj.weight_scale_inv`).buffer)));
      const names = stepKernels(be, d);
      for (const k of ['op_gemm_tc_fp8_store', 'op_gemm_tc_fp8_add', 'op_gemm_tc_fp8_swiglu', 'op_gemv_fp8_b1_r2_store', 'op_gemv_fp8_b1_r2_add', 'op_gemv_fp8_b1_r2_swiglu']) assert.ok(names.has(k), `${k} launched (${[...names].join(', ')})`);
      assert.ok([...names].some((k) => /^op_gemv_b1_r\d_store$/.test(k)), 'the router and lm head stay bf16');
    });
  });

  it('host memory: weights as held plus the banks stay below a float32 copy of the weights', async (t) => {
    const m = await loadModelFor(FP8, 'cpu');
    // The CPU load leaves the FP8 experts in the shards (StoredExpert) and the banks read them in as stored.
    const { expertIntermediate: I, hiddenSize: H } = m.spec;
    const streamed = m.weights.layers.reduce((a, l) => a + l.experts.filter((e) => e.stored).length, 0);
    assert.equal(streamed, m.weights.layers.reduce((a, l) => a + l.experts.length, 0), 'every routed expert streamed');
    const b = createCpuBackend(m.spec, m.weights, { placement: { hotPerLayer: 12 } });
    try {
      const banks = b.banks.bytes;
      const held = heldBytes(m.weights);
      const expertsF32 = streamed * 4 * 3 * I * H;
      const f32 = float32Bytes(m.weights) + expertsF32;
      t.diagnostic(`float32 copy of the weights ${MiB(f32)}; held: weights ${MiB(held)} (bf16 embeddings, lm head, norms and routers as float32; FP8 as stored) + banks ${MiB(banks)} (FP8 experts as stored) = ${MiB(held + banks)} (process figures: bench/cpu/memory.ts)`);
      assert.ok(held + banks < f32, `held ${held + banks} bytes, float32 copy ${f32}`);
      // The experts, the bulk of a real MoE, are a quarter of their float32 size (one byte a value, plus scales).
      const q = m.spec.quantization;
      assert.ok(q?.method === 'fp8');
      const [b0, b1] = q.blockSize;
      const grid = (rows: number, cols: number): number => Math.ceil(rows / b0) * Math.ceil(cols / b1);
      const stored = streamed * (3 * I * H + 4 * (2 * grid(I, H) + grid(H, I)));
      assert.ok(banks >= stored && banks < 1.01 * stored, `banks ${banks} bytes for ${stored} stored expert bytes`);
      assert.ok(stored < 0.26 * expertsF32);
    } finally {
      b.dispose();
    }
  });
});

/** The CUDA backend on the fake driver over a loaded model (12 experts a layer hot) for `body`; disposed after, leaving nothing live. */
async function withFakeOpBackend(m: Awaited<ReturnType<typeof loadModelFor>>, body: (be: SequenceBackend<CudaBackend>, d: FakeCudaDriver) => void): Promise<void> {
  const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-op-'));
  for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, m.spec, m.tensors, { kernelDir, placement: { hotPerLayer: 12 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32 }));
  try {
    body(be, d);
  } finally {
    be.dispose();
    rmSync(kernelDir, { recursive: true, force: true });
  }
  assert.deepEqual(d.liveByKind(), {});
}

/** The kernels a prefill piece of 20 tokens (tensor cores) and then one decode step (gemv) launch. */
function stepKernels(be: SequenceBackend<CudaBackend>, d: FakeCudaDriver): Set<string> {
  be.openSequence(0, 40);
  d.launches.length = 0;
  be.forward({ chunks: [{ seq: 0, tokens: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 0 }], count: true });
  be.forward({ chunks: [{ seq: 0, tokens: [4], startPos: 20 }], count: true });
  return new Set(d.launches.map((x) => x.name));
}

/** The fixture rewritten into `dir` as one safetensors file, `edit` applied to its tensors first. */
async function rewritten(src: string, dir: string, edit: (ts: TensorToWrite[]) => TensorToWrite[]): Promise<void> {
  const raw = await readCheckpoint(await openCheckpoint(src));
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(src, f), join(dir, f));
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(edit([...raw.values()].map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: t.bytes })))));
}

describe('gpt-oss-tiny-mxfp4', () => {
  it('a corrupt MXFP4 scale (0xFF, or one that overflows float32) or packed data not in U8 is refused at load, naming the tensor', async () => {
    const scales = 'model.layers.2.mlp.experts.gate_up_proj_scales';
    const put = (v: number) => (ts: TensorToWrite[]) => ts.map((t) => (t.name === scales ? { ...t, bytes: Uint8Array.from(t.bytes, (b, i) => (i === 4 * 256 + 3 ? v : b)) } : t));
    await withTempDir(async (dir) => {
      await rewritten(MXFP4, dir, put(0xff));
      await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /gate_up_proj_scales": MXFP4 scale 0xFF \(E8M0 NaN\) at expert 1 row 0 group 3/);
      await rewritten(MXFP4, dir, put(254));
      await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /MXFP4 scale 254 .*expected at most 252/);
      await rewritten(MXFP4, dir, (ts) => ts.map((t) => (t.name === scales ? { ...t, dtype: 'F8_E4M3' as const } : t)));
      await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /gate_up_proj_scales" is F8_E4M3/);
    });
  });

  it('the tensor description carries MXFP4 blocks, scales and the group of 32', async () => {
    const [stream, full] = await Promise.all([loadModel(MXFP4, { stream: true }), loadModel(MXFP4, { raw: false })]);
    try {
      const blocks = 'model.layers.1.mlp.experts.down_proj_blocks';
      const info = stream.tensors.info(blocks);
      assert.deepEqual(info.quant, { format: 'mxfp4', matrices: 16, rows: 128, cols: 128, data: blocks, scales: 'model.layers.1.mlp.experts.down_proj_scales', block: [1, 32] });
      // Expert 3's down_proj as stored is the matrix the CPU computes with.
      const per = info.bytes / 16;
      const data = new Uint8Array(per);
      stream.tensors.read(blocks, data, 3 * per);
      assert.deepEqual(data, (full.weights.layers[1]!.experts[3]!.down as Mxfp4Matrix).data);
      assert.equal(stream.tensors.info('model.layers.1.self_attn.q_proj.weight').quant, undefined);
      assert.equal(stream.tensors.info('model.layers.1.mlp.experts.down_proj_scales').quant, undefined);
    } finally {
      stream.tensors.close();
    }
  });

  it('CUDA (fake driver): experts banked as stored slices (blocks, scales, biases); MXFP4 kernels for the experts only, hd 32 attention', async () => {
    const m = await loadModelFor(MXFP4, 'cuda');
    assert.doesNotThrow(() => checkCudaSupport(m.spec));
    await withFakeOpBackend(m, (be, d) => {
      const { hiddenSize: H, expertIntermediate: I } = m.spec;
      const row = be.rowLayout;
      assert.equal(row.format, 'mxfp4');
      assert.equal(row.interleaved, true);
      // gate | up blocks, down blocks, their scales, their biases (bf16): 16-byte aligned pieces.
      assert.equal(be.banks.rowBytes, I * H + (H * I) / 2 + (2 * I * H) / 32 + (H * I) / 32 + 2 * 2 * I + 2 * H);
      assert.match(be.hotReason, /MXFP4 as stored/);
      // Layer 1's first cold row holds its expert's slice of each stacked tensor, exactly.
      const e = be.banks.expertAt(1, 'cold', 0);
      const host = be.banks.coldRowBytes(1, 0);
      const slice = (name: string, at: number, bytes: number): void => {
        const want = new Uint8Array(bytes);
        m.tensors.read(`model.layers.1.mlp.experts.${name}`, want, e * bytes);
        assert.deepEqual(host.subarray(at, at + bytes), want, name);
      };
      slice('gate_up_proj_blocks', row.gateUpAt, I * H);
      slice('down_proj_blocks', row.downAt, (H * I) / 2);
      slice('gate_up_proj_scales', row.gateUpGridAt, (2 * I * H) / 32);
      slice('down_proj_scales', row.downGridAt, (H * I) / 32);
      slice('gate_up_proj_bias', row.gateUpBiasAt, 4 * I);
      slice('down_proj_bias', row.downBiasAt, 2 * H);
      const names = stepKernels(be, d);
      // Batch 1 decode: gate/up as a grouped gemv, down as the product that adds its picks to the residual (fuseResidual).
      for (const k of [/^op_gemm_tc_mxfp4_swiglu$/, /^op_gemm_tc_mxfp4_store$/, /^op_gemv_mxfp4_b1_r\d_swiglu$/, /^op_gemv_mxfp4_b1_r\d_combine$/, /^op_attend_hd32_g2$/, /^op_attend_decode_hd32_g2$/, /^op_gemm_tc_add$/]) {
        assert.ok([...names].some((n) => k.test(n)), `${k} launched (${[...names].join(', ')})`);
      }
      assert.ok(![...names].some((k) => /fp8/.test(k)), 'no FP8 kernels');
      assert.ok([...names].some((k) => /^op_gemv_b1_r\d_store$/.test(k)), 'q/k/v, the router and lm head stay bf16');
    });
  });
});
