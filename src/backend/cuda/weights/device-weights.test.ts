// Weights on the device as stored: the FP8 scale grids the kernels read, the experts' bank rows, and the
// bytes the memory plan counts (bf16 vs block FP8 at Qwen3-30B-A3B shapes, MXFP4 at gpt-oss-120b's), without a GPU.
import { describe, it } from 'node:test';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { familyConfig } from '../../../../fixtures/fixture-paths.ts';
import { parseConfig } from '../../../model/config.ts';
import { syntheticConfig } from '../../../model/synthetic.ts';
import { mapTensorSource } from '../../../model/tensor-source.ts';
import type { RawTensor } from '../../../model/weights.ts';
import { fillFp8Grid, fp8Grid } from './fp8-grid.ts';
import { deviceWeightBytes, expertRowLayout, productWeights, readGrid } from './device-weights.ts';
import { fp8Projections, headerSource } from './header-source.ts';
import { hotExpertsThatFit } from '../memory/memory.ts';

/** A bf16 KV pool of 16-position blocks, at least --max-model-len 4096 x 4 sequences. */
const KV = { blockSize: 16, dtype: 'bfloat16' as const, maxBlocks: 256 };
import { memoryNeeds } from '../memory/workspace.ts';

const QUANT = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] };
const q30 = (layers: number, quant?: object) => parseConfig(syntheticConfig({
  vocab_size: 8192, hidden_size: 2048, num_hidden_layers: layers, num_attention_heads: 32, num_key_value_heads: 4, head_dim: 128,
  moe_intermediate_size: 768, num_experts: 128, num_experts_per_tok: 8, tie_word_embeddings: false, max_position_embeddings: 40960,
  ...(quant ? { quantization_config: quant } : {}),
}), 'q30');

describe('fp8 scale grids', () => {
  it('real shapes: one scale row per 128 weight rows, the stored scales concatenated', () => {
    const gu = fp8Grid([768, 768], 2048, [128, 128]);
    assert.deepEqual({ ...gu }, { sRows: 128, sCols: 128, sLd: 16, rows: 12, bytes: 4 * 12 * 16 });
    assert.equal(fp8Grid([4096, 512, 512], 2048, [128, 128]).sRows, 128);
    const down = fp8Grid([2048], 768, [128, 128]);
    assert.deepEqual([down.sRows, down.sLd, down.rows], [128, 6, 16]);
    const gate = Float32Array.from({ length: 6 * 16 }, (_, i) => i), up = Float32Array.from({ length: 6 * 16 }, (_, i) => 1000 + i);
    const g = fillFp8Grid(gu, [768, 768], 128, [gate, up]);
    assert.deepEqual(Array.from(g.subarray(0, 6 * 16)), Array.from(gate));
    assert.deepEqual(Array.from(g.subarray(6 * 16)), Array.from(up));
  });
  it('stacked matrices off the block boundaries: finer scale rows, each inside one block of one matrix', () => {
    // gate | up of 96 rows each, blocks of 128: boundary at 96 -> scale rows of 32; a partial trailing K block.
    const g = fp8Grid([96, 96], 200, [128, 128]);
    assert.deepEqual([g.sRows, g.sLd, g.rows], [32, 2, 6]);
    const gate = Float32Array.of(1, 2), up = Float32Array.of(3, 4); // one block row each ([ceil(96/128)][2])
    assert.deepEqual(Array.from(fillFp8Grid(g, [96, 96], 128, [gate, up])), [1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4]);
    // Every weight row r reads the scale of its own matrix's block: r / sRows lands in the right part.
    const three = fp8Grid([200, 56, 56], 64, [128, 128]);
    assert.equal(three.sRows, 8); // gcd(128, 200, 256)
    const parts = [Float32Array.of(10, 11), Float32Array.of(20), Float32Array.of(30)];
    const v = fillFp8Grid(three, [200, 56, 56], 128, parts);
    const scaleOf = (r: number): number => v[Math.floor(r / three.sRows) * three.sLd]!;
    assert.deepEqual([0, 127, 128, 199, 200, 255, 256, 311].map(scaleOf), [10, 10, 11, 11, 20, 20, 30, 30]);
  });
});

describe('weights on the device as stored', () => {
  it('Qwen3-30B-A3B shapes: an FP8 expert row is half a bf16 one plus its grids; 16 layers of FP8 take ~half the bytes', () => {
    const bf16 = q30(16), fp8 = q30(16, QUANT);
    const rb = expertRowLayout(headerSource(bf16), bf16), rf = expertRowLayout(headerSource(fp8, fp8Projections), fp8);
    assert.equal(rb.bytes, 3 * 768 * 2048 * 2);
    assert.equal(rf.format, 'fp8');
    assert.equal(rf.bytes, 3 * 768 * 2048 + 4 * (12 * 16 + 16 * 6));
    assert.deepEqual([rf.gateUpAt, rf.downAt, rf.gateUpGridAt, rf.downGridAt], [0, 2 * 768 * 2048, 3 * 768 * 2048, 3 * 768 * 2048 + 4 * 12 * 16]);
    const wb = deviceWeightBytes(headerSource(bf16), bf16), wf = deviceWeightBytes(headerSource(fp8, fp8Projections), fp8);
    const all = (w: typeof wb): number => w.resident + 16 * 128 * w.expertRow;
    // The checkpoint's 20.0 GB in bf16 less nothing of note; FP8 keeps embeddings, lm_head, norms and routers bf16.
    assert.ok(Math.abs(all(wb) - 20.01e9) < 0.02e9, `bf16 ${all(wb)}`);
    assert.ok(all(wf) / all(wb) > 0.5 && all(wf) / all(wb) < 0.55, `fp8 / bf16 ${all(wf) / all(wb)}`);
    // The same budget holds twice the hot experts when they are FP8.
    const fits = (spec: typeof bf16, w: typeof wb) => hotExpertsThatFit(128, (h) => memoryNeeds(spec, h + 2, 2048, 32, w, KV), 2 ** 33, 0.9, 4096, { minBlocks: 4096 * 4 / 16 }).hot;
    const hb = fits(bf16, wb), hf = fits(fp8, wf);
    assert.ok(hb > 0 && hb < 128, `bf16 hot ${hb}`);
    assert.ok(hf >= 2 * hb - 1, `fp8 hot ${hf} vs bf16 ${hb}`);
  });
  it('gpt-oss-120b shapes, MXFP4 experts: a bank row is the stored blocks, scales and biases; the same budget holds ~3.7x the experts of bf16 rows', (t) => {
    const fx = JSON.parse(readFileSync(familyConfig('gpt-oss-tiny-mxfp4'), 'utf8')) as Record<string, unknown>;
    const g = parseConfig({
      ...fx, vocab_size: 8192, hidden_size: 2880, intermediate_size: 2880, num_hidden_layers: 36, num_attention_heads: 64, num_key_value_heads: 8,
      head_dim: 64, num_local_experts: 128, num_experts_per_tok: 4, sliding_window: 128, max_position_embeddings: 131072,
      layer_types: Array.from({ length: 36 }, (_, l) => (l % 2 ? 'full_attention' : 'sliding_attention')),
    }, 'g120');
    const src = headerSource(g, (n) => (/_(blocks|scales)$/.test(n) ? 'U8' : 'BF16'));
    const row = expertRowLayout(src, g);
    const H = 2880, I = 2880;
    assert.equal(row.format, 'mxfp4');
    assert.equal(row.bytes, I * H + (H * I) / 2 + (2 * I * H) / 32 + (H * I) / 32 + 2 * 2 * I + 2 * H); // 12.62 MiB
    const w = deviceWeightBytes(src, g);
    // The experts as stored: 36 x 128 x 12.62 MiB = 61.0 GB, the bulk of the real checkpoint's ~61 GiB.
    assert.ok(Math.abs(36 * 128 * w.expertRow - 61.0e9) < 0.1e9, `${36 * 128 * w.expertRow}`);
    const bf16Row = 3 * I * H * 2;
    assert.ok(bf16Row / row.bytes > 3.7 && bf16Row / row.bytes < 3.8);
    const fits = (expertRow: number) => hotExpertsThatFit(128, (h) => memoryNeeds(g, h + 2, 2048, 32, { ...w, expertRow }, KV), 40 * 2 ** 30, 0.9, 4096, { minBlocks: 4096 * 4 / 16 }).hot;
    const hb = fits(bf16Row), hm = fits(row.bytes);
    assert.ok(hb > 0 && hm < 128, `bf16 rows ${hb} hot, MXFP4 ${hm}`);
    assert.ok(hm >= 3.6 * hb, `MXFP4 hot ${hm} vs bf16 rows ${hb}`);
    t.diagnostic(`a 40 GiB device at 0.9: ${hb} bf16 rows or ${hm} MXFP4 rows per layer hot (36 layers)`);
  });
  it('refuses what the kernels cannot read, naming the tensor', () => {
    const fp8 = q30(1, QUANT);
    const mixed = headerSource(fp8, (n) => (n.endsWith('k_proj.weight') ? 'BF16' : fp8Projections(n)));
    assert.throws(() => deviceWeightBytes(mixed, fp8), /k_proj\.weight is BF16 but model\.layers\.0\.self_attn\.q_proj\.weight, computed in the same product, is not/);
    const odd = q30(1, { ...QUANT, weight_block_size: [128, 48] });
    assert.throws(() => deviceWeightBytes(headerSource(odd, fp8Projections), odd), /FP8 blocks of \[128, 48\].*multiple of 32/);
    const f32 = q30(1);
    assert.throws(() => expertRowLayout(headerSource(f32, () => 'F32'), f32), /keeps weights as stored, bf16 or block FP8: tensor .* is F32/);
  });
  it('scale grids are read and checked as they are built: a negative scale is refused naming its tensor', () => {
    const spec = q30(1, QUANT);
    const name = 'model.layers.0.self_attn.o_proj.weight';
    const raw = new Map<string, RawTensor>([
      [name, { name, dtype: 'F8_E4M3', shape: [2048, 4096], bytes: new Uint8Array(2048 * 4096) }],
      [`${name}_scale_inv`, { name: `${name}_scale_inv`, dtype: 'F32', shape: [16, 32], bytes: new Uint8Array(Float32Array.from({ length: 512 }, (_, i) => (i === 40 ? -1 : 0.5)).buffer) }],
    ]);
    const p = productWeights(mapTensorSource(raw, spec.quantization), spec, [name], [2048], 4096);
    assert.throws(() => readGrid(mapTensorSource(raw, spec.quantization), p), /o_proj\.weight_scale_inv": the scale of block \[1, 8\] is -1/);
  });
});
