// The MXFP4 packer of tests and tools: what it stores reads back (quant.ts) as the values it reports, each
// within half an E2M1 step of its input, with the group scale make-checkpoint.py's mxfp4_one picks.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mxfp4Block } from './mxfp4-block.ts';
import { dequantize, FP4_VALUES } from './quant.ts';
import { mulberry32 } from '../util/rng.ts';

describe('mxfp4Block', () => {
  it('packs rows of groups that read back as its dequantized values, each near its input', () => {
    const [rows, cols] = [5, 96];
    const rand = mulberry32(3);
    const w = Float32Array.from({ length: rows * cols }, () => Math.fround((rand() - 0.5) * 0.3));
    const q = mxfp4Block(w, rows, cols);
    assert.equal(q.blocks.length, rows * (cols / 32) * 16);
    assert.equal(q.scales.length, rows * (cols / 32));
    const read = dequantize({ format: 'mxfp4', rows, cols, data: q.blocks, scales: q.scales, block: [1, 32] });
    assert.deepEqual(read, q.dequantized);
    for (let g = 0; g < rows * (cols / 32); g++) {
      let amax = 0;
      for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(w[g * 32 + j]!));
      const e = q.scales[g]! - 127;
      assert.equal(e, Math.ceil(Math.log2(Math.fround(amax / 6))), `group ${g}: the smallest scale that holds amax`);
      for (let j = 0; j < 32; j++) {
        // The E2M1 grid is 0.5 apart below 2, 1 below 4, 2 above: half of that, times the scale.
        const v = w[g * 32 + j]! / 2 ** e;
        const half = Math.abs(v) < 2 ? 0.25 : Math.abs(v) < 4 ? 0.5 : 1;
        assert.ok(Math.abs(q.dequantized[g * 32 + j]! / 2 ** e - v) <= half, `group ${g} value ${j}`);
      }
    }
  });

  it('low nibble first, negative codes 8..15, a value that rounds to zero keeps code 0, ties go to the smaller magnitude', () => {
    // Scale 2^0 (amax 6): values on the grid and between it.
    const w = new Float32Array(32);
    w.set([6, -6, 0.5, -0.5, -0.2, 0.25, 2.5, -5]);
    const q = mxfp4Block(w, 1, 32);
    assert.equal(q.scales[0], 127);
    const codes = Array.from(q.blocks.subarray(0, 4)).flatMap((b) => [b & 15, b >> 4]);
    assert.deepEqual(codes, [7, 15, 1, 9, 0, 0, 4, 14]);
    assert.deepEqual(codes.map((c) => FP4_VALUES[c]), [6, -6, 0.5, -0.5, 0, 0, 2, -4]);
  });

  it('refuses a row length that is not a multiple of 32', () => {
    assert.throws(() => mxfp4Block(new Float32Array(40), 1, 40), /cols 40 is not a multiple of 32/);
  });
});
