// The one greedy pick (backend.ts argmax) and the decoding of the device's argmax keys (bestArgmaxKey), against
// a twin of kernels/common.cuh argmax_key: the same token whichever block holds the best key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { argmax, withHostArgmax } from './argmax.ts';
import { argmaxOfRow, bestArgmaxKey } from './cuda/step/argmax-keys.ts';

/** kernels/common.cuh argmax_key, as the device computes it: [lo, hi] words of the 64-bit key. */
function key(v: number, idx: number): [number, number] {
  if (Number.isNaN(v)) return [0, 0];
  const u = new Uint32Array(new Float32Array([v === 0 ? 0 : v]).buffer)[0]!;
  const hi = u & 0x80000000 ? ~u >>> 0 : (u | 0x80000000) >>> 0;
  return [(0xffffffff - idx) >>> 0, hi];
}

/** Each block's best key over its slice, as op_argmax_rows writes them. */
function blockKeys(x: Float32Array, blocks: number): Uint32Array {
  const per = Math.ceil(x.length / blocks);
  const out = new Uint32Array(2 * blocks);
  for (let b = 0; b < blocks; b++) {
    let best: [number, number] = [0, 0];
    for (let o = b * per; o < Math.min(x.length, (b + 1) * per); o++) {
      const k = key(x[o]!, o);
      if (k[1] > best[1] || (k[1] === best[1] && k[0] > best[0])) best = k;
    }
    out[2 * b] = best[0];
    out[2 * b + 1] = best[1];
  }
  return out;
}

test('argmax: the first of the largest; a NaN never wins; -Infinity everywhere gives 0', () => {
  assert.equal(argmax(new Float32Array([1, 3, 3, 2]), 0, 4), 1);
  assert.equal(argmax(new Float32Array([9, 1, 3, 3]), 1, 3), 1);
  assert.equal(argmax(new Float32Array([Number.NaN, -1, Number.NaN, -0.5]), 0, 4), 3);
  assert.equal(argmax(new Float32Array([-0, 0]), 0, 2), 0);
  assert.equal(argmax(new Float32Array([-Infinity, -Infinity]), 0, 2), 0);
  assert.equal(argmax(new Float32Array([Number.NaN, -Infinity]), 0, 2), 1);
  assert.equal(argmax(new Float32Array([Number.NaN, Number.NaN]), 0, 2), 0);
});

test('bestArgmaxKey: the device keys give the host argmax, ties to the lower index, -0 equal to +0, whatever the blocks', () => {
  const rows = [
    new Float32Array([0.5, -2, 7, 7, 1, 7]),
    new Float32Array([-3, -1, -1, -8]),
    new Float32Array([-0, 0, -1]),
    new Float32Array([Number.NaN, -5, Number.NaN, -4]),
    new Float32Array([Number.NaN, -Infinity, Number.NaN]),
    new Float32Array([-Infinity, -Infinity, -Infinity]),
    Float32Array.from({ length: 1000 }, (_, i) => Math.sin(i * 12.9898) * 100),
  ];
  for (const x of rows) for (const blocks of [1, 2, 3, 32]) assert.equal(bestArgmaxKey(blockKeys(x, blocks), 0, blocks), argmax(x, 0, x.length), `${x.length} values in ${blocks} blocks`);
  assert.equal(bestArgmaxKey(new Uint32Array(8), 0, 4), 0, 'no key (every value NaN): token 0');
});

test('argmaxOfRow: each row\'s argmax from keys laid out `blocks` a row in host bytes (at an offset, as pinned buffers are)', () => {
  const rows = [new Float32Array([1, 9, 3, 9]), new Float32Array([-4, -2, -3, -8]), new Float32Array([Number.NaN, 5, 6, 0])];
  for (const blocks of [1, 2, 32]) {
    const words = new Uint32Array(2 + 2 * blocks * rows.length);
    rows.forEach((x, r) => words.set(blockKeys(x, blocks), 2 + 2 * blocks * r));
    const bytes = new Uint8Array(words.buffer, 8); // the keys start 8 bytes into their buffer
    rows.forEach((x, r) => assert.equal(argmaxOfRow(bytes, r, blocks), argmax(x, 0, x.length), `row ${r}, ${blocks} blocks`));
  }
});

test('withHostArgmax: each chunk\'s argmax when asked, nothing otherwise', () => {
  const logits = new Float32Array([0, 2, 1, 5, 4, 3]);
  const input = { chunks: [{ seq: 0, tokens: [1], startPos: 0 }, { seq: 1, tokens: [1], startPos: 0 }], count: false };
  assert.equal(withHostArgmax(input, { logits }, 3).argmax, undefined);
  assert.deepEqual(Array.from(withHostArgmax({ ...input, argmaxOnly: true }, { logits }, 3).argmax!), [1, 0]);
});
