// Quantized checkpoints at load: the stored values (block FP8 with partial trailing blocks, MXFP4), the
// quantization_config fields, and every corrupt or inconsistent checkpoint refused by name before use.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { dequantize, dequantRow, FP4_VALUES, FP8_E4M3_VALUES, type Fp8Matrix, type QuantMatrix } from './quant.ts';
import { notConverted, parseQuantization } from './quant-config.ts';
import { mxfp4Matrix } from './quant-read.ts';
import { loadModel } from './load.ts';
import { parseConfig } from './config.ts';
import { syntheticConfig, syntheticTensors, writeSyntheticCheckpoint } from './synthetic.ts';
import type { TensorToWrite } from './safetensors-writer.ts';
import { float32Bytes } from './safetensors-writer.ts';
import { rejectsWith, withTempDir } from './test-helpers.ts';
import type { RawTensor } from './weights.ts';

const FP8 = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [4, 3] };
/** hidden 8, experts 6 wide: blocks of [4, 3] leave partial blocks in both dimensions of every matrix. */
const fp8Config = (q: Record<string, unknown> = FP8): Record<string, unknown> => syntheticConfig({ quantization_config: q });

describe('float8_e4m3fn values', () => {
  it('decodes normals, subnormals, the maximum and NaN by byte', () => {
    assert.equal(FP8_E4M3_VALUES[0x38], 1);
    assert.equal(FP8_E4M3_VALUES[0x3c], 1.5);
    assert.equal(FP8_E4M3_VALUES[0xb8], -1);
    assert.equal(FP8_E4M3_VALUES[0x08], 2 ** -6); // smallest normal
    assert.equal(FP8_E4M3_VALUES[0x01], 2 ** -9); // smallest subnormal
    assert.equal(FP8_E4M3_VALUES[0x07], 7 * 2 ** -9);
    assert.equal(FP8_E4M3_VALUES[0x7e], 448);
    assert.equal(FP8_E4M3_VALUES[0xfe], -448);
    assert.ok(Object.is(FP8_E4M3_VALUES[0x80], -0));
    assert.ok(Number.isNaN(FP8_E4M3_VALUES[0x7f]) && Number.isNaN(FP8_E4M3_VALUES[0xff]));
  });

  it('a row is float32(e4m3 x its block scale), trailing partial blocks included', () => {
    // [5][5] in blocks of [2, 3]: scales [3][2]; row 4 sits in block row 2, columns 3..4 in block column 1.
    const data = Uint8Array.from({ length: 25 }, (_, i) => (i * 7) % 0x70);
    const scales = Float32Array.from({ length: 6 }, (_, i) => 0.1 * (i + 1));
    const m: Fp8Matrix = { format: 'fp8', rows: 5, cols: 5, data, scales, block: [2, 3] };
    const row = new Float32Array(5);
    dequantRow(m, 4, row);
    for (let c = 0; c < 5; c++) assert.equal(row[c], Math.fround(FP8_E4M3_VALUES[data[20 + c]!]! * scales[4 + (c < 3 ? 0 : 1)]!));
    dequantRow(m, 1, row);
    assert.equal(row[4], Math.fround(FP8_E4M3_VALUES[data[9]!]! * scales[1]!));
    assert.deepEqual(dequantize(m).subarray(20), new Float32Array(dequantize(m).subarray(20)));
  });
});

describe('MXFP4 values', () => {
  const raw = (name: string, bytes: Uint8Array, shape: number[]): RawTensor => ({ name, dtype: 'U8', shape, bytes });
  it('E2M1 pairs (low nibble first) times 2^(scale - 127)', () => {
    // One expert, one row of 32 values: bytes 0x10 (0, 0.5), 0xF7 (6, -6), then zeros; scale 128 (x2).
    const blocks = new Uint8Array(16);
    blocks[0] = 0x10;
    blocks[1] = 0xf7;
    const m = (s: number): QuantMatrix => mxfp4Matrix(raw('b', blocks, [1, 1, 1, 16]), raw('s', new Uint8Array([s]), [1, 1, 1]), 0, 1, 32);
    const w = dequantize(m(128));
    assert.deepEqual([...w.subarray(0, 4)], [0, 1, 12, -12]);
    assert.ok(w.subarray(4).every((v) => v === 0));
    assert.equal(dequantize(m(125))[3], -1.5);
    assert.equal(dequantize(m(252))[2], 6 * 2 ** 125);
    assert.equal(FP4_VALUES.length, 16);
  });
  it('a scale of 0xFF (NaN) or one that overflows float32 is refused naming the tensor, expert, row and group', () => {
    const blocks = raw('x_blocks', new Uint8Array(32), [2, 1, 1, 16]);
    assert.throws(() => mxfp4Matrix(blocks, raw('x_scales', new Uint8Array([127, 255]), [2, 1, 1]), 1, 1, 32), /"x_scales": MXFP4 scale 0xFF \(E8M0 NaN\) at expert 1 row 0 group 0/);
    assert.throws(() => mxfp4Matrix(blocks, raw('x_scales', new Uint8Array([253, 1]), [2, 1, 1]), 0, 1, 32), /MXFP4 scale 253 .*overflows float32.* expected at most 252/);
  });
});

describe('quantization_config', () => {
  it('fp8: block size, defaults, modules_to_not_convert', () => {
    assert.deepEqual(parseQuantization('qwen3_moe', { quant_method: 'fp8', weight_block_size: [128, 128] }, ['fp8']), { method: 'fp8', blockSize: [128, 128], notConvert: [] });
    const s = parseConfig(fp8Config({ ...FP8, modules_to_not_convert: ['lm_head'] }), 'x');
    assert.deepEqual(s.quantization, { method: 'fp8', blockSize: [4, 3], notConvert: ['lm_head'] });
  });
  for (const [field, q, code] of [
    ['quant_method', { quant_method: 'bitsandbytes' }, 'UNSUPPORTED_MODEL'],
    ['quant_method', { quant_method: 7 }, 'BAD_CONFIG'],
    ['fmt', { ...FP8, fmt: 'e5m2' }, 'UNSUPPORTED_MODEL'],
    ['activation_scheme', { ...FP8, activation_scheme: 'static' }, 'UNSUPPORTED_MODEL'],
    ['weight_block_size', { ...FP8, weight_block_size: null }, 'UNSUPPORTED_MODEL'],
    ['weight_block_size', { ...FP8, weight_block_size: [128, 0] }, 'BAD_CONFIG'],
    ['weight_block_size', { ...FP8, weight_block_size: [128] }, 'BAD_CONFIG'],
    ['modules_to_not_convert', { ...FP8, modules_to_not_convert: 'lm_head' }, 'BAD_CONFIG'],
  ] as const) {
    it(`refuses ${field} ${JSON.stringify(q[field as keyof typeof q])}, naming it`, async () => {
      await rejectsWith(() => parseConfig(fp8Config(q), 'x'), code, new RegExp(`quantization_config\\.${field}: `));
    });
  }
  it('mxfp4 is gpt-oss only; fp8 is refused there', async () => {
    await rejectsWith(() => parseConfig(fp8Config({ quant_method: 'mxfp4' }), 'x'), 'UNSUPPORTED_MODEL', /quant_method: "mxfp4" is not supported for qwen3_moe; only "fp8"/);
  });
  it('modules_to_not_convert names modules and their prefixes, * spanning any run', () => {
    const q = { method: 'mxfp4', notConvert: ['model.layers.*.self_attn', 'lm_head'] } as const;
    assert.ok(notConverted(q, 'model.layers.3.self_attn.q_proj'));
    assert.ok(notConverted(q, 'lm_head'));
    assert.ok(!notConverted(q, 'model.layers.3.mlp.experts'));
    assert.ok(!notConverted(q, 'lm_head_extra'));
  });
});

/** Writes the fp8 synthetic checkpoint with `edit` applied to its tensors, then loads it. */
async function loadEdited(edit: (ts: TensorToWrite[]) => TensorToWrite[], config = fp8Config()): Promise<unknown> {
  return withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { config, shards: 2, edit });
    return loadModel(dir, { raw: false });
  });
}

const EXPERT = 'model.layers.1.mlp.experts.2.down_proj.weight';
const setBytes = (ts: TensorToWrite[], name: string, f: (b: Uint8Array) => Uint8Array): TensorToWrite[] =>
  ts.map((t) => (t.name === name ? { ...t, bytes: f(t.bytes.slice()) } : t));

describe('block-FP8 checkpoints', () => {
  it('load as stored: bytes and scales exactly as in the shards, every projection and expert quantized', async () => {
    let written: TensorToWrite[] = [];
    const m = (await loadEdited((ts) => (written = ts))) as Awaited<ReturnType<typeof loadModel>>;
    const byName = new Map(written.map((t) => [t.name, t]));
    const down = m.weights.layers[1]!.experts[2]!.down as Fp8Matrix;
    assert.equal(down.format, 'fp8');
    assert.deepEqual([down.rows, down.cols, ...down.block], [8, 6, 4, 3]);
    assert.deepEqual(down.data, byName.get(EXPERT)!.bytes);
    assert.deepEqual(new Uint8Array(down.scales.buffer, down.scales.byteOffset, down.scales.byteLength), byName.get(`${EXPERT}_scale_inv`)!.bytes);
    for (const l of m.weights.layers) {
      for (const p of [l.qProj, l.kProj, l.vProj, l.oProj, ...l.experts.flatMap((e) => [e.gate, e.up, e.down])]) assert.ok(!(p instanceof Float32Array));
      assert.ok(l.router instanceof Float32Array, 'routers stay float');
    }
    assert.ok(m.weights.embed instanceof Float32Array);
  });

  it('a NaN byte (0x7F / 0xFF) is refused naming the tensor and element', async () => {
    await rejectsWith(loadEdited((ts) => setBytes(ts, EXPERT, (b) => ((b[13] = 0xff), b))), 'BAD_CHECKPOINT', new RegExp(`"${EXPERT.replace(/\./g, '\\.')}": element 13 of 8x6 is NaN`));
  });
  it('a scale that is NaN, negative or would overflow is refused naming the scale tensor', async () => {
    const scale = `${EXPERT}_scale_inv`;
    const put = (v: number) => (ts: TensorToWrite[]) => setBytes(ts, scale, (b) => (b.set(float32Bytes([v]), 4 * 3), b));
    await rejectsWith(loadEdited(put(NaN)), 'BAD_CHECKPOINT', /_scale_inv": element 3 of 2x2 is NaN/);
    await rejectsWith(loadEdited(put(-0.5)), 'BAD_CHECKPOINT', /_scale_inv": the scale of block \[1, 1\] is -0\.5, expected a non-negative scale/);
    await rejectsWith(loadEdited(put(1e36)), 'BAD_CHECKPOINT', /the scale of block \[1, 1\] is 9\.99999\d*e\+35.*448 x scale must stay finite/);
  });
  it('missing scales, scales of the wrong shape or dtype are refused from the headers', async () => {
    const scale = `${EXPERT}_scale_inv`;
    await rejectsWith(loadEdited((ts) => ts.filter((t) => t.name !== scale)), 'BAD_CHECKPOINT', /is F8_E4M3 but its block scales ".*down_proj\.weight_scale_inv" are missing/);
    await rejectsWith(loadEdited((ts) => ts.map((t) => (t.name === scale ? { ...t, shape: [3, 2] as number[], bytes: new Uint8Array(24) } : t))), 'BAD_CHECKPOINT',
      /has shape \[3, 2\] but the \[8, 6\] weight in blocks of \[4, 3\] \(quantization_config\.weight_block_size\) needs \[2, 2\]/);
    await rejectsWith(loadEdited((ts) => ts.map((t) => (t.name === scale ? { ...t, dtype: 'U8' as const, shape: [2, 2, 4] as number[] } : t))), 'BAD_CHECKPOINT', /FP8 block scales must be F32 or BF16/);
  });
  it('F8_E4M3 where the config declares no fp8, on a router, or on a module not to convert, is refused', async () => {
    await rejectsWith(loadEdited(() => syntheticTensors(fp8Config()), syntheticConfig()), 'BAD_CHECKPOINT', /is F8_E4M3 but config\.json has no quantization_config with quant_method "fp8"/);
    const router = 'model.layers.0.mlp.gate.weight';
    await rejectsWith(loadEdited((ts) => ts.map((t) => (t.name === router ? { ...t, dtype: 'F8_E4M3' as const, bytes: t.bytes.subarray(0, t.bytes.length / 2) } : t))), 'BAD_CHECKPOINT',
      /"model\.layers\.0\.mlp\.gate\.weight" is F8_E4M3, but only linear projections/);
    await rejectsWith(loadEdited((ts) => ts, fp8Config({ ...FP8, modules_to_not_convert: ['model.layers.*.self_attn'] })), 'BAD_CHECKPOINT',
      /"model\.layers\.0\.self_attn\.q_proj\.weight" is F8_E4M3 but config\.json quantization_config\.modules_to_not_convert lists model\.layers\.0\.self_attn\.q_proj/);
  });
});

it('firstBadE8m0: the first scale byte over 252, four bytes a step at any alignment, as a plain scan finds it', async () => {
  const { firstBadE8m0, MXFP4_MAX_SCALE } = await import('./quant-read.ts');
  const plain = (b: Uint8Array): number => b.findIndex((x) => x > MXFP4_MAX_SCALE);
  const buf = new Uint8Array(64 + 8);
  for (let v = 0; v < 256; v++) {
    for (let align = 0; align < 4; align++) {
      for (const at of [0, 1, 5, 30, 63]) {
        const b = buf.subarray(align, align + 64).fill(127);
        b[at] = v;
        assert.equal(firstBadE8m0(b), plain(b), `byte ${v} at ${at}, offset ${align}`);
      }
    }
  }
  // Several bad bytes: the first; short and empty arrays.
  const b = new Uint8Array(40).fill(200);
  b[33] = 255;
  b[17] = 253;
  assert.equal(firstBadE8m0(b), 17);
  assert.equal(firstBadE8m0(b.subarray(18, 21)), -1);
  assert.equal(firstBadE8m0(new Uint8Array(0)), -1);
  assert.equal(firstBadE8m0(b.subarray(33, 34)), 0);
});
