import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { f16BitsToF32Bits, tensorToFloat32 } from './convert.ts';
import { float32Bytes, float32ToBF16Bytes } from './safetensors-writer.ts';

/** f16 decoded by its definition, as a float64 (exact: every f16 is a float64). */
function f16Reference(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  if (exp === 0) return sign * mant * 2 ** -24;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

describe('float32 conversion', () => {
  it('f16 -> f32 is exact for all 65536 bit patterns', () => {
    const f = new Float32Array(1);
    const bits = new Uint32Array(f.buffer);
    for (let h = 0; h < 0x10000; h++) {
      bits[0] = f16BitsToF32Bits(h);
      const want = f16Reference(h);
      if (Number.isNaN(want)) assert.ok(Number.isNaN(f[0]!), `h=${h.toString(16)}`);
      else assert.ok(Object.is(f[0], want), `h=${h.toString(16)}: ${f[0]} != ${want}`);
    }
  });

  it('bf16 -> f32 is the 16-bit shift, at unaligned offsets too', () => {
    const values = [0, -0, 1, -2.5, 3.140625, 1e-40, 65280, -Infinity];
    const bytes = float32ToBF16Bytes(values);
    const unaligned = new Uint8Array(bytes.length + 1).subarray(1);
    unaligned.set(bytes);
    const want = [0, -0, 1, -2.5, 3.140625, new Float32Array(new Uint32Array([0x00010000]).buffer)[0], 65280, -Infinity];
    assert.deepEqual([...tensorToFloat32({ name: 't', dtype: 'BF16', shape: [values.length], bytes: unaligned })], want);
    assert.deepEqual([...tensorToFloat32({ name: 't', dtype: 'BF16', shape: [values.length], bytes })], want);
  });

  it('bf16 writer rounds to nearest even', () => {
    const conv = (x: number) => tensorToFloat32({ name: 't', dtype: 'BF16', shape: [1], bytes: float32ToBF16Bytes([x]) })[0];
    assert.equal(conv(1 + 2 ** -8), 1); // tie -> even (1.0)
    assert.equal(conv(1 + 3 * 2 ** -8), 1 + 2 ** -6); // tie -> even (upper)
    assert.equal(conv(1 + 2 ** -8 + 2 ** -20), 1 + 2 ** -7); // above the tie rounds up
    assert.ok(Number.isNaN(conv(NaN)));
  });

  it('f32 copies bytes from unaligned views', () => {
    const bytes = float32Bytes([1.5, -7.25e-12]);
    const unaligned = new Uint8Array(bytes.length + 3).subarray(3);
    unaligned.set(bytes);
    assert.deepEqual([...tensorToFloat32({ name: 't', dtype: 'F32', shape: [2], bytes: unaligned })], [1.5, Math.fround(-7.25e-12)]);
  });
});
