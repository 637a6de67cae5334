// The block-FP8 writer of tests and tools: e4m3 rounding (every code back to itself, ties to even) and the
// blocks (partial trailing ones, scale amax / 448, values within half a step of the input).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { float32ToE4m3, fp8Block } from './fp8-block.ts';
import { dequantize, FP8_E4M3_VALUES } from './quant.ts';

describe('fp8Block', () => {
  it('float32ToE4m3: every finite code maps back to itself, midpoints round to the even code', () => {
    for (let c = 0; c < 0x7f; c++) {
      assert.equal(float32ToE4m3(FP8_E4M3_VALUES[c]!), c);
      assert.equal(float32ToE4m3(-FP8_E4M3_VALUES[c]!), c | 0x80);
    }
    for (let c = 0; c < 0x7e; c++) {
      const mid = (FP8_E4M3_VALUES[c]! + FP8_E4M3_VALUES[c + 1]!) / 2;
      assert.equal(float32ToE4m3(mid), c % 2 === 0 ? c : c + 1, `between 0x${c.toString(16)} and the next`);
    }
  });

  it('partial trailing blocks: one scale a block (amax / 448), values within half a step, as the reader dequantizes them', () => {
    const [rows, cols] = [200, 300];
    const w = Float32Array.from({ length: rows * cols }, (_, i) => Math.fround(Math.sin(i * 1.3) * (1 + (i % 7))));
    const q = fp8Block(w, rows, cols, [128, 128]);
    assert.equal(q.scales.length, 2 * 3);
    // Block [1, 2]: rows 128..199, cols 256..299.
    let amax = 0;
    for (let r = 128; r < rows; r++) for (let c = 256; c < cols; c++) amax = Math.max(amax, Math.abs(w[r * cols + c]!));
    assert.equal(q.scales[5], Math.fround(amax / 448));
    for (let i = 0; i < w.length; i++) {
      if (Math.abs(w[i]!) > 0.5) assert.ok(Math.abs(q.dequantized[i]! - w[i]!) <= Math.abs(w[i]!) / 16, `value ${i}`);
    }
    const read = dequantize({ format: 'fp8', rows, cols, data: q.data, scales: q.scales, block: [128, 128] });
    assert.deepEqual(read, q.dequantized);
  });
});
