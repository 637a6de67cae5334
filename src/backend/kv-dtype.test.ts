// The KV dtype spec (kv-dtype.ts) at its edges: bf16 ties to even, NaN, overflow, subnormals; fp8 e4m3 ties,
// subnormals, the largest value 448 and saturation past it (infinities too), NaN, signed zero; every e4m3 value
// round-trips, and random values round to the nearest e4m3 value as an independent table search finds it. And the
// CPU backend stores its keys and values on the dtype's grid.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bf16Bits, e4m3Byte, e4m3Value, parseKvCacheDtype, roundBf16, roundFp8, roundKv } from './kv-dtype.ts';
import { float32ToE4m3 } from '../model/fp8-block.ts';
import { FP8_E4M3_VALUES } from '../model/quant.ts';
import { mulberry32 } from '../util/rng.ts';
import { syntheticModel } from './cpu/synthetic.ts';
import { CpuBackend } from './cpu/cpu-backend.ts';

const f32 = (bits: number): number => new Float32Array(new Uint32Array([bits >>> 0]).buffer)[0]!;

test('bf16: round to nearest, ties to even; NaN stays NaN; past the largest bf16 is infinite; subnormals round too', () => {
  assert.equal(roundBf16(1 + 2 ** -8), 1, 'a tie goes down to the even mantissa');
  assert.equal(roundBf16(1 + 3 * 2 ** -8), 1 + 2 ** -6, 'a tie goes up to the even mantissa');
  assert.equal(roundBf16(1 + 2 ** -8 + 2 ** -20), 1 + 2 ** -7, 'past the tie: up');
  assert.equal(roundBf16(-(1 + 3 * 2 ** -8)), -(1 + 2 ** -6));
  assert.ok(Number.isNaN(roundBf16(NaN)));
  assert.equal(bf16Bits(NaN) & 0x7f80, 0x7f80);
  assert.equal(roundBf16(Infinity), Infinity);
  assert.equal(roundBf16(f32(0x7f7fffff)), Infinity, 'float32 max rounds past the largest bf16');
  assert.equal(roundBf16(f32(0x7f7f7fff)), f32(0x7f7f0000), 'just below the halfway point stays finite');
  assert.equal(roundBf16(f32(0x00008000)), f32(0x00000000), 'a subnormal tie goes to even (zero)');
  assert.equal(roundBf16(f32(0x00018000)), f32(0x00020000), 'and up to even');
  assert.ok(Object.is(roundBf16(-0), -0));
});

test('fp8 e4m3: ties to even, subnormals, 448 and saturation (infinities too), NaN, signed zero', () => {
  assert.equal(roundFp8(1.0625), 1, 'between 1 and 1.125: the even one');
  assert.equal(roundFp8(1.1875), 1.25, 'between 1.125 and 1.25: the even one');
  assert.equal(roundFp8(1.07), 1.125);
  assert.equal(roundFp8(2 ** -9), 2 ** -9, 'the smallest subnormal');
  assert.equal(roundFp8(2 ** -10), 0, 'half the smallest subnormal: ties to zero');
  assert.equal(roundFp8(3 * 2 ** -10), 2 ** -8, '1.5 subnormal units: to 2');
  assert.equal(roundFp8(7.5 * 2 ** -9), 2 ** -6, 'the top subnormal tie goes to the smallest normal');
  assert.equal(roundFp8(448), 448);
  assert.equal(roundFp8(449), 448, 'past 448: saturates');
  assert.equal(roundFp8(464), 448, 'the halfway point to 480 too');
  assert.equal(roundFp8(1e30), 448);
  assert.equal(roundFp8(Infinity), 448, 'satfinite: infinities saturate');
  assert.equal(roundFp8(-Infinity), -448);
  assert.equal(roundFp8(-300), -288, 'between 288 and 320: 300 is nearer 288');
  assert.ok(Number.isNaN(roundFp8(NaN)));
  assert.equal(e4m3Byte(NaN), 0x7f);
  assert.equal(e4m3Byte(-0), 0x80);
  assert.ok(Object.is(roundFp8(-1e-9), -0), 'a tiny negative rounds to -0');
  assert.equal(roundFp8(100, 4), 96, 'with a scale: e4m3(100 / 4) x 4');
});

test('fp8 e4m3: every value round-trips; random values round as a search of the value table does', () => {
  for (let b = 0; b < 256; b++) {
    if ((b & 0x7f) === 0x7f) continue;
    assert.equal(e4m3Byte(e4m3Value(b)), b === 0x80 ? 0x80 : b, `byte ${b.toString(16)}`);
    assert.equal(e4m3Value(b), FP8_E4M3_VALUES[b]);
  }
  const rand = mulberry32(9);
  for (let i = 0; i < 50_000; i++) {
    const x = Math.fround((rand() * 2 - 1) * 2 ** Math.floor(rand() * 24 - 14));
    assert.equal(e4m3Byte(x), float32ToE4m3(x), `x = ${x}`);
  }
});

test('--kv-cache-dtype: vLLM\'s names, auto resolved, others refused naming the flag', () => {
  assert.equal(parseKvCacheDtype('auto', 'float32'), 'float32');
  assert.equal(parseKvCacheDtype('fp8_e4m3', 'float32'), 'fp8');
  assert.equal(parseKvCacheDtype('bfloat16', 'float32'), 'bfloat16');
  assert.throws(() => parseKvCacheDtype('fp16', 'float32'), /--kv-cache-dtype 'fp16': expected auto, float32, bfloat16 or fp8/);
});

test('the CPU backend stores keys and values on the dtype\'s grid', () => {
  const { spec, weights } = syntheticModel({ seed: 3, vocabSize: 64, hiddenSize: 32 });
  for (const [dtype, code] of [['bfloat16', 1], ['fp8', 2]] as const) {
    const be = new CpuBackend(spec, weights, { kvCache: { dtype, blockSize: 4, blocks: 4 } });
    be.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3, 4, 5, 6], startPos: 0, blockTable: [2, 0] }], count: false });
    const kvW = spec.numKvHeads * spec.headDim;
    for (let l = 0; l < spec.numLayers; l++) {
      for (const a of [be.kvCache.keys[l]!, be.kvCache.values[l]!]) {
        const rows = [8, 9, 10, 11, 0, 1].map((r) => a.subarray(r * kvW, r * kvW + kvW));
        for (const row of rows) for (const v of row) assert.equal(roundKv(code, v), v, `${dtype} layer ${l}: ${v} is not on the grid`);
        assert.ok(rows.every((row) => row.some((v) => v !== 0)), 'every written row holds values');
      }
    }
    be.dispose();
  }
});
