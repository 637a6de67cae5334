// 4-bit checkpoints at load (GPTQ, AWQ, compressed-tensors pack-quantized): each format's repack checked against a
// hand-written example of its reference packing (words computed by hand from the reference code, comments below), the
// quantization_config fields and which modules each format quantizes, and every corrupt or inconsistent checkpoint
// (a bad shape, a NaN scale, a group not dividing a row, act-order groups, zero points a symmetric config forbids, a
// weight_shape that disagrees, a wrong dtype) refused at load naming the tensor, loaded and streamed alike.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { dequantize, type Int4Matrix } from './quant.ts';
import { int4Matrix } from './int4-repack.ts';
import { int4Module, type Int4Spec } from './int4-config.ts';
import { packAwq, packCompressedTensors, packGptq, type Int4Weights } from './int4-pack.ts';
import { parseConfig } from './config.ts';
import { loadModel } from './load.ts';
import { syntheticConfig, writeSyntheticCheckpoint } from './synthetic.ts';
import type { TensorToWrite } from './safetensors-writer.ts';
import { rejectsWith, withTempDir } from './test-helpers.ts';
import type { RawTensor } from './weights.ts';
import { INT4_QUANT_CONFIGS, int4FixtureConfig, type Int4FixtureFormat } from './int4-fixture.ts';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const spec = (format: Int4FixtureFormat): Int4Spec => parseConfig(int4FixtureConfig(format), 'x').quantization as Int4Spec;
const words = (...w: number[]): Uint8Array => new Uint8Array(Uint32Array.from(w).buffer);
const halves = (...h: number[]): Uint8Array => new Uint8Array(Uint16Array.from(h).buffer);
const tensors = (ts: RawTensor[]) => (name: string): RawTensor | undefined => ts.find((t) => t.name === name);
const raw = (name: string, dtype: RawTensor['dtype'], shape: number[], bytes: Uint8Array): RawTensor => ({ name, dtype, shape, bytes });
/** Row r of m's codes (0 .. 15), from the repacked bytes. */
const codes = (m: Int4Matrix, r: number): number[] => Array.from({ length: m.cols }, (_, c) => (m.data[(r * m.cols + c) >> 1]! >> ((c & 1) * 4)) & 15);

describe('repacking checked against the reference packings, by hand', () => {
  it('GPTQ: qweight along K (value 8i + j at bits 4j), qzeros along N stored minus one (v1), fp16 scales [groups][N]', () => {
    // Column 0 of an [8 out][8 in] weight holds codes 1..8 down K: pack_quantized_values_into_int32 (packed_dim 0) puts
    // value j at bits 4j: 0x87654321. Column 3 holds 15 at k = 0 and 0 elsewhere: 0x0000000F.
    // Zero points of columns 0..7 are 8, 8, 1, 2, 3, 4, 15, 16; v1 stores each minus one in 4 bits (7, 7, 0, 1, 2, 3, 14, 15),
    // column j at bits 4j: nibbles (high to low) F E 3 2 1 0 7 7 = 0xFE321077; read back with GPTQModel's + 1.
    const qweight = new Uint32Array(8);
    qweight[0] = 0x87654321;
    qweight[3] = 0x0000000f;
    const ts = [
      raw('m.qweight', 'I32', [1, 8], new Uint8Array(qweight.buffer)),
      raw('m.qzeros', 'I32', [1, 1], words(0xfe321077)),
      raw('m.scales', 'F16', [1, 8], halves(0x3c00, 0x3800, 0x4000, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3400)), // 1, 0.5, 2, 1, ..., 0.25
      raw('m.g_idx', 'I32', [8], new Uint8Array(new Int32Array(8).buffer)),
    ];
    const q: Int4Spec = { ...spec('gptq-zp'), groupSize: 8 };
    const m = int4Matrix(q, 'm.weight', 8, 8, tensors(ts));
    assert.deepEqual(codes(m, 0), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert.deepEqual([...m.data.subarray(0, 4)], [0x21, 0x43, 0x65, 0x87], 'row 0 is the column\'s word as it is');
    assert.deepEqual(codes(m, 3), [15, 0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual([...m.zeros], [8, 8, 1, 2, 3, 4, 15, 16]);
    const w = dequantize(m);
    assert.deepEqual([...w.subarray(0, 8)], [-7, -6, -5, -4, -3, -2, -1, 0]); // (q - 8) x 1
    assert.equal(w[3 * 8], (15 - 2) * 1);
    assert.equal(w[7 * 8], (0 - 16) * 0.25);
    // The TS packer (fixtures) writes the same words.
    const x: Int4Weights = { N: 8, K: 8, G: 8, q: Uint8Array.from({ length: 64 }, (_, i) => codes(m, i >> 3)[i & 7]!), scales: m.scales, scaleType: 'f16', zeros: m.zeros };
    const packed = packGptq(x, 'm');
    assert.deepEqual(packed.map((t) => t.bytes), [ts[0]!.bytes, ts[1]!.bytes, ts[2]!.bytes, ts[3]!.bytes]);
  });

  it('GPTQ symmetric: every stored zero point 7 (8 - 1); another one is refused naming qzeros', () => {
    const ts = [
      raw('m.qweight', 'I32', [1, 8], new Uint8Array(32)),
      raw('m.qzeros', 'I32', [1, 1], words(0x77777777)),
      raw('m.scales', 'F16', [1, 8], halves(...Array(8).fill(0x3c00))),
    ];
    const q: Int4Spec = { ...spec('gptq'), groupSize: 8 };
    const m = int4Matrix(q, 'm.weight', 8, 8, tensors(ts));
    assert.equal(m.zeros.length, 0, 'symmetric: no zero points kept');
    assert.ok(dequantize(m).every((v) => v === -8));
    ts[1] = raw('m.qzeros', 'I32', [1, 1], words(0x77787777));
    assert.throws(() => int4Matrix(q, 'm.weight', 8, 8, tensors(ts)), /"m\.qzeros": output 4 group 0 has zero point 9, but quantization_config\.sym is true/);
  });

  it('AWQ (GEMM): eight columns a word in the order [0, 2, 4, 6, 1, 3, 5, 7], qzeros alike, read back through REVERSE_AWQ_ORDER', () => {
    // Row k = 0 of qweight holds columns 0..7 = codes 1..8; AutoAWQ packs column order_map[i] into bits 4i, so the
    // nibbles are 1, 3, 5, 7, 2, 4, 6, 8 (low to high): 0x86427531. Zero points of columns 0..7 = 8..15: nibbles 8, 10,
    // 12, 14, 9, 11, 13, 15: 0xFDB9ECA8. Rows k = 1..7 are zero.
    const qweight = new Uint32Array(8);
    qweight[0] = 0x86427531;
    const ts = [
      raw('m.qweight', 'I32', [8, 1], new Uint8Array(qweight.buffer)),
      raw('m.qzeros', 'I32', [1, 1], words(0xfdb9eca8)),
      raw('m.scales', 'F16', [1, 8], halves(...Array(8).fill(0x3c00))),
    ];
    const q: Int4Spec = { ...spec('awq'), groupSize: 8 };
    const m = int4Matrix(q, 'm.weight', 8, 8, tensors(ts));
    for (let n = 0; n < 8; n++) assert.deepEqual(codes(m, n), [n + 1, 0, 0, 0, 0, 0, 0, 0], `output ${n}`);
    assert.deepEqual([...m.zeros], [8, 9, 10, 11, 12, 13, 14, 15]);
    assert.deepEqual([...dequantize(m).filter((_, i) => i % 8 === 0)], [-7, -7, -7, -7, -7, -7, -7, -7]);
    const x: Int4Weights = { N: 8, K: 8, G: 8, q: Uint8Array.from({ length: 64 }, (_, i) => codes(m, i >> 3)[i & 7]!), scales: m.scales, scaleType: 'f16', zeros: m.zeros };
    assert.deepEqual(packAwq(x, 'm').map((t) => t.bytes), ts.map((t) => t.bytes));
  });

  it('compressed-tensors pack-quantized: value 8i + j at bits 4j of weight_packed[n][i], stored as q + 8; weight_shape [N, K]', () => {
    // Signed codes -8, -1, 0, 1, 2, 3, 7, -3 are stored + 8 (pack_to_int32's offset): 0, 7, 8, 9, 10, 11, 15, 5, value j
    // at bits 4j: 0x5FBA9870.
    const ts = [
      raw('m.weight_packed', 'I32', [1, 1], words(0x5fba9870)),
      raw('m.weight_scale', 'BF16', [1, 1], halves(0x3f00)), // 0.5
      raw('m.weight_shape', 'I64', [2], new Uint8Array(BigInt64Array.from([1n, 8n]).buffer)),
    ];
    const q: Int4Spec = { ...spec('ct-int4'), groupSize: 8 };
    const m = int4Matrix(q, 'm.weight', 1, 8, tensors(ts));
    assert.deepEqual([...m.data], [0x70, 0x98, 0xba, 0x5f], 'the word as it is');
    assert.equal(m.scaleType, 'bf16');
    assert.deepEqual([...dequantize(m)], [-8, -1, 0, 1, 2, 3, 7, -3].map((v) => v * 0.5));
    const x: Int4Weights = { N: 1, K: 8, G: 8, q: Uint8Array.from(codes(m, 0)), scales: m.scales, scaleType: 'bf16', zeros: null };
    assert.deepEqual(packCompressedTensors(x, 'm').map((t) => t.bytes), ts.map((t) => t.bytes));
    ts[2] = raw('m.weight_shape', 'I32', [2], new Uint8Array(Int32Array.from([8, 1]).buffer));
    assert.throws(() => int4Matrix(q, 'm.weight', 1, 8, tensors(ts)), /"m\.weight_shape" holds \[8, 1\], expected the weight's shape \[1, 8\]/);
  });

  it('a NaN or infinite scale is refused naming the tensor, output and group; a non-trivial g_idx naming g_idx', () => {
    const gptq = (scale: number, gIdx = new Int32Array(16)) => [
      raw('m.qweight', 'I32', [2, 8], new Uint8Array(64)),
      raw('m.qzeros', 'I32', [1, 1], words(0x77777777)),
      raw('m.scales', 'F16', [1, 8], halves(0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, scale, 0x3c00, 0x3c00)),
      raw('m.g_idx', 'I32', [16], new Uint8Array(gIdx.buffer)),
    ];
    const q: Int4Spec = { ...spec('gptq'), groupSize: 16 };
    assert.throws(() => int4Matrix(q, 'm.weight', 8, 16, tensors(gptq(0x7e00))), /"m\.scales": the scale of output 5 group 0 is NaN \(f16 bits 0x7e00\)/);
    assert.throws(() => int4Matrix(q, 'm.weight', 8, 16, tensors(gptq(0xfc00))), /the scale of output 5 group 0 is infinite/);
    const perm = Int32Array.from({ length: 16 }, (_, k) => (k === 9 ? 1 : 0));
    assert.throws(() => int4Matrix(q, 'm.weight', 8, 16, tensors(gptq(0x3c00, perm))), /"m\.g_idx": column 9 is in group 1, expected 0 .*act-order \(desc_act\) groups are not supported/);
    const ct = [
      raw('m.weight_packed', 'I32', [1, 1], words(0)),
      raw('m.weight_scale', 'BF16', [1, 1], halves(0x7f90)),
      raw('m.weight_shape', 'I32', [2], new Uint8Array(Int32Array.from([1, 8]).buffer)),
    ];
    assert.throws(() => int4Matrix({ ...spec('ct-int4'), groupSize: 8 }, 'm.weight', 1, 8, tensors(ct)), /"m\.weight_scale": the scale of output 0 group 0 is NaN \(bf16 bits 0x7f90\)/);
    ct[1] = raw('m.weight_scale', 'BF16', [1, 1], halves(0x7e00)); // 2^125: x 16 overflows
    assert.throws(() => int4Matrix({ ...spec('ct-int4'), groupSize: 8 }, 'm.weight', 1, 8, tensors(ct)), /is so large that 16 x scale overflows float32/);
  });
});

describe('quantization_config of the 4-bit formats', () => {
  it('parses each format\'s config as the hub spells it', () => {
    assert.deepEqual(spec('gptq'), { method: 'gptq', groupSize: 32, zeroPoints: false, zeroOffset: 1, notConvert: [], inBlock: null, targets: [], ignore: [] });
    assert.deepEqual(spec('gptq-zp'), { method: 'gptq', groupSize: 32, zeroPoints: true, zeroOffset: 1, notConvert: [], inBlock: null, targets: [], ignore: [] });
    assert.deepEqual(spec('awq'), { method: 'awq', groupSize: 32, zeroPoints: true, zeroOffset: 0, notConvert: [], inBlock: null, targets: [], ignore: [] });
    assert.deepEqual(spec('ct-int4'), { method: 'compressed-tensors', groupSize: 32, zeroPoints: false, zeroOffset: 0, notConvert: [], inBlock: null, targets: ['Linear'], ignore: ['lm_head', 're:.*mlp.gate$'] });
    const q = (c: Record<string, unknown>) => parseConfig(syntheticConfig({ quantization_config: c }), 'x').quantization as Int4Spec;
    // AutoAWQ's own spellings, GPTQ v2, per-channel groups, a deepseek_v3 (Kimi K2) config.
    assert.deepEqual([q({ quant_method: 'awq', w_bit: 4, q_group_size: 64, zero_point: true, version: 'GEMM' }).groupSize], [64]);
    assert.equal(q({ ...INT4_QUANT_CONFIGS['gptq'], checkpoint_format: 'gptq_v2' }).zeroOffset, 0);
    assert.equal(q({ ...INT4_QUANT_CONFIGS['gptq'], group_size: -1 }).groupSize, 0);
    const ct = INT4_QUANT_CONFIGS['ct-int4'] as { config_groups: { group_0: { weights: Record<string, unknown> } } };
    assert.equal(q({ ...ct, config_groups: { g: { ...ct.config_groups.group_0, weights: { ...ct.config_groups.group_0.weights, strategy: 'channel', group_size: null } } } }).groupSize, 0);
  });

  it('which linears are 4-bit: GPTQ and AWQ every decoder-block *_proj but modules_to_not_convert (substrings), dynamic "-:" and outside modules_in_block_to_quantize; compressed-tensors its targets less ignore', () => {
    const q = spec('gptq');
    for (const m of ['model.layers.0.self_attn.q_proj', 'model.layers.47.mlp.experts.127.down_proj', 'model.layers.3.self_attn.kv_a_proj_with_mqa', 'model.layers.3.mlp.shared_experts.up_proj']) assert.ok(int4Module(q, m), m);
    for (const m of ['model.layers.0.mlp.gate', 'lm_head', 'model.embed_tokens', 'mtp.layers.0.q_proj']) assert.ok(!int4Module(q, m), m);
    const awq = { ...spec('awq'), notConvert: ['self_attn'] };
    assert.ok(!int4Module(awq, 'model.layers.1.self_attn.o_proj') && int4Module(awq, 'model.layers.1.mlp.experts.0.gate_proj'));
    const dyn = parseConfig(syntheticConfig({ quantization_config: { ...INT4_QUANT_CONFIGS['gptq'], dynamic: { '-:.*\\.self_attn\\..*': {} } } }), 'x').quantization as Int4Spec;
    assert.ok(!int4Module(dyn, 'model.layers.1.self_attn.o_proj') && int4Module(dyn, 'model.layers.1.mlp.experts.0.gate_proj'));
    const blocks = parseConfig(syntheticConfig({ quantization_config: { ...INT4_QUANT_CONFIGS['gptq'], modules_in_block_to_quantize: [['self_attn.q_proj', 'self_attn.k_proj'], ['mlp.experts.0.down_proj']] } }), 'x').quantization as Int4Spec;
    assert.ok(int4Module(blocks, 'model.layers.5.self_attn.k_proj') && int4Module(blocks, 'model.layers.5.mlp.experts.0.down_proj'));
    assert.ok(!int4Module(blocks, 'model.layers.5.self_attn.v_proj') && !int4Module(blocks, 'model.layers.5.mlp.experts.1.down_proj'));
    // Kimi K2 Thinking's ignore list: the attention, shared experts and dense MLPs stay bf16, routed experts 4-bit.
    const kimi: Int4Spec = { ...spec('ct-int4'), ignore: ['lm_head', 're:.*self_attn.*', 're:.*shared_experts.*', 're:.*mlp\\.(gate|up|gate_up|down)_proj.*'] };
    assert.ok(int4Module(kimi, 'model.layers.3.mlp.experts.7.gate_proj'));
    for (const m of ['model.layers.3.self_attn.q_a_proj', 'model.layers.3.mlp.shared_experts.down_proj', 'model.layers.0.mlp.down_proj']) assert.ok(!int4Module(kimi, m), m);
    assert.ok(!int4Module({ ...kimi, targets: ['re:.*self_attn.*'] }, 'model.layers.3.mlp.experts.7.gate_proj'), 'not a target');
  });

  const base = INT4_QUANT_CONFIGS;
  const ctWeights = (w: Record<string, unknown>) => ({ ...base['ct-int4'], config_groups: { group_0: { targets: ['Linear'], weights: { num_bits: 4, type: 'int', symmetric: true, strategy: 'group', group_size: 32, ...w } } } });
  for (const [field, q, code] of [
    ['bits', { ...base['gptq'], bits: 8 }, 'UNSUPPORTED_MODEL'],
    ['desc_act', { ...base['gptq'], desc_act: true }, 'UNSUPPORTED_MODEL'],
    ['group_size', { ...base['gptq'], group_size: 0 }, 'BAD_CONFIG'],
    ['checkpoint_format', { ...base['gptq'], checkpoint_format: 'marlin' }, 'UNSUPPORTED_MODEL'],
    ['lm_head', { ...base['gptq'], lm_head: true }, 'UNSUPPORTED_MODEL'],
    ['dynamic\\["\\+:.*"\\]', { ...base['gptq'], dynamic: { '+:.*down_proj': { bits: 8 } } }, 'UNSUPPORTED_MODEL'],
    ['version', { ...base['awq'], version: 'gemv' }, 'UNSUPPORTED_MODEL'],
    ['zero_point', { ...base['awq'], zero_point: false }, 'UNSUPPORTED_MODEL'],
    ['format', { ...base['ct-int4'], format: 'int-quantized' }, 'UNSUPPORTED_MODEL'],
    ['quantization_status', { ...base['ct-int4'], quantization_status: 'frozen' }, 'UNSUPPORTED_MODEL'],
    ['config_groups\\.group_0\\.weights\\.symmetric', ctWeights({ symmetric: false }), 'UNSUPPORTED_MODEL'],
    ['config_groups\\.group_0\\.weights\\.actorder', ctWeights({ actorder: 'group' }), 'UNSUPPORTED_MODEL'],
    ['config_groups\\.group_0\\.weights\\.type', ctWeights({ type: 'float' }), 'UNSUPPORTED_MODEL'],
    ['config_groups\\.group_0\\.input_activations', { ...ctWeights({}), config_groups: { group_0: { ...ctWeights({}).config_groups.group_0, input_activations: { num_bits: 8 } } } }, 'UNSUPPORTED_MODEL'],
  ] as const) {
    it(`refuses ${field.replace(/\\/g, '')} as ${JSON.stringify(q).slice(0, 60)}..., naming it`, async () => {
      await rejectsWith(() => parseConfig(syntheticConfig({ quantization_config: q }), 'x'), code, new RegExp(`quantization_config\\.${field}: `));
    });
  }
});

const EXPERT = 'model.layers.1.mlp.experts.2.down_proj';
const edit = (name: string, f: (t: TensorToWrite) => TensorToWrite | null) => (ts: TensorToWrite[]): TensorToWrite[] =>
  ts.flatMap((t) => (t.name === name ? (f(t) ? [f(t)!] : []) : [t]));
/** Bytes of t with 16-bit value i set to v. */
const withHalf = (t: TensorToWrite, i: number, v: number): TensorToWrite => {
  const b = t.bytes.slice();
  new DataView(b.buffer).setUint16(2 * i, v, true);
  return { ...t, bytes: b };
};

/** Writes fixture `format` with `change` applied to its tensors (and `config` over its config.json), then loads it. */
async function loadChanged(format: Int4FixtureFormat, change: (ts: TensorToWrite[]) => TensorToWrite[], config?: Record<string, unknown>): Promise<void> {
  await withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { config: int4FixtureConfig(format), shards: 2, seed: 48, edit: change });
    if (config) await writeFile(join(dir, 'config.json'), JSON.stringify(config));
    await loadModel(dir, { raw: false });
  });
}

describe('corrupt or inconsistent 4-bit checkpoints are refused at load, naming the tensor', () => {
  it('a stored tensor of the wrong shape, missing, or of the wrong dtype (from the headers)', async () => {
    await rejectsWith(loadChanged('gptq', edit(`${EXPERT}.qweight`, (t) => ({ ...t, shape: [8, 32] }))), 'BAD_CHECKPOINT',
      /tensor "model\.layers\.1\.mlp\.experts\.2\.down_proj\.qweight" has shape \[8, 32\] but config\.json implies \[4, 64\]/);
    await rejectsWith(loadChanged('awq', edit(`${EXPERT}.scales`, () => null)), 'BAD_CHECKPOINT', /missing 1 tensor\(s\).*"model\.layers\.1\.mlp\.experts\.2\.down_proj\.scales"/);
    await rejectsWith(loadChanged('ct-int4', edit(`${EXPERT}.weight_scale`, (t) => ({ ...t, dtype: 'F32', bytes: new Uint8Array(2 * t.bytes.length) }))), 'BAD_CHECKPOINT',
      /tensor "model\.layers\.1\.mlp\.experts\.2\.down_proj\.weight_scale" is F32: compressed-tensors scales are F16 or BF16/);
    await rejectsWith(loadChanged('gptq', edit(`${EXPERT}.qweight`, (t) => ({ ...t, dtype: 'F32' }))), 'BAD_CHECKPOINT', /down_proj\.qweight" is F32: gptq values are I32/);
  });

  it('a NaN or infinite scale, in a projection or an expert (src/backend/cpu/int4.test.ts: streamed into the banks)', async () => {
    await rejectsWith(loadChanged('gptq', edit('model.layers.0.self_attn.o_proj.scales', (t) => withHalf(t, 70, 0x7e00))), 'BAD_CHECKPOINT',
      /"model\.layers\.0\.self_attn\.o_proj\.scales": the scale of output 6 group 1 is NaN/);
    await rejectsWith(loadChanged('ct-int4', edit(`${EXPERT}.weight_scale`, (t) => withHalf(t, 5, 0xff80))), 'BAD_CHECKPOINT', /down_proj\.weight_scale": the scale of output 5 group 0 is infinite/);
  });

  it('a group size that does not divide a row, act-order g_idx, zero points a symmetric config forbids', async () => {
    const c = int4FixtureConfig('gptq');
    await rejectsWith(loadChanged('gptq', (ts) => ts, { ...c, quantization_config: { ...INT4_QUANT_CONFIGS['gptq'], group_size: 24 } }), 'BAD_CHECKPOINT',
      /model\.layers\.0\.self_attn\.q_proj: quantization_config group size 24 does not divide its input size 64/);
    const moved = (t: TensorToWrite): TensorToWrite => { const g = new Int32Array(t.bytes.slice().buffer); g[40] = 0; return { ...t, bytes: new Uint8Array(g.buffer) }; };
    await rejectsWith(loadChanged('gptq', edit('model.layers.1.self_attn.k_proj.g_idx', moved)), 'BAD_CHECKPOINT', /"model\.layers\.1\.self_attn\.k_proj\.g_idx": column 40 is in group 0, expected 1/);
    await rejectsWith(loadChanged('gptq', edit(`${EXPERT}.qzeros`, (t) => ({ ...t, bytes: t.bytes.map((b, i) => (i === 0 ? 0x87 : b)) }))), 'BAD_CHECKPOINT',
      /"model\.layers\.1\.mlp\.experts\.2\.down_proj\.qzeros": output 1 group 0 has zero point 9/);
  });

  it('a router stored in 4 bits is refused with what is read in 4 bits', async () => {
    const router = 'model.layers.0.mlp.gate.weight';
    await rejectsWith(loadChanged('ct-int4', (ts) => ts.flatMap((t) => (t.name === router ? [{ ...t, name: 'model.layers.0.mlp.gate.weight_packed', dtype: 'I32' as const, shape: [8, 8], bytes: new Uint8Array(256) }] : [t]))),
      'BAD_CHECKPOINT', /"model\.layers\.0\.mlp\.gate\.weight" is stored in 4 bits, but the engine reads it as stored floats/);
  });
});
