// The q/k/v job (OP_QKV: a step's tokens split between threads, each computing its tokens' stacked q|k|v rows and
// their prologue: q/k head norms, RoPE, the key and value written to the token's cache): bit-identical to the serial
// compute (q, every cache byte) for token counts below and above the split, GQA and odd head sizes, tokens of
// several sequences at scattered positions, with the JS loops and the SIMD kernel, the workers taking part.
import { test } from 'node:test';
import type { RowCompute } from '../row-compute.ts';
import type { Alloc } from '../alloc.ts';
import { assertSplitMatchesSerial } from './split-harness.ts';
import { ropeTables, type QkvShape } from '../attention-ops.ts';
import type { KvDtypeCode } from '../../kv-dtype.ts';
import { mulberry32 } from '../synthetic.ts';
import { bytesOf as bytes } from '../test-helpers.ts';

const POSITIONS = 48;

/** q and every cache after compute.qkv on random inputs (the same seed on every compute); tokens go to 3 sequences. */
function qkvOn(compute: RowCompute, alloc: Alloc, tokens: number, heads: number, kvHeads: number, d: number, hidden: number): Buffer {
  const rand = mulberry32(tokens * 131 + heads * 7 + d);
  const W = (heads + 2 * kvHeads) * d;
  const w = alloc.f32(W * hidden);
  const x = alloc.f32(tokens * hidden);
  for (const a of [w, x]) for (let i = 0; i < a.length; i++) a[i] = rand() * 2 - 1;
  const { cos: c, sin: s } = ropeTables(d, 10000, POSITIONS);
  const copy = (a: Float32Array): Float32Array => {
    const b = alloc.f32(a.length);
    b.set(a);
    return b;
  };
  const norm = (): Float32Array => copy(Float32Array.from({ length: d }, () => 0.5 + rand()));
  // Keys and values stored in float32, bf16 and fp8 by turns (the rounding runs where the prologue does).
  const shape: QkvShape = { heads, kvHeads, d, qNorm: norm(), kNorm: norm(), eps: 1e-6, cos: copy(c), sin: copy(s), kvDtype: (tokens % 3) as KvDtypeCode };
  // One pool of rows for 3 sequences, each position's row scattered (the block table's work, done here by hand).
  const keys = alloc.f32(3 * POSITIONS * kvHeads * d);
  const values = alloc.f32(3 * POSITIONS * kvHeads * d);
  const seqOf = (i: number): number => i % 3;
  const pos = Int32Array.from({ length: tokens }, (_, i) => Math.floor(i / 3) * 2 + (i % 3));
  const rowOf = Int32Array.from({ length: tokens }, (_, i) => 3 * POSITIONS - 1 - (pos[i]! * 3 + seqOf(i)));
  const pages = { table: new Int32Array(0), tableOf: new Int32Array(tokens), rowOf: alloc.i32(tokens), blockSize: 1 };
  pages.rowOf.set(rowOf);
  const qkv = alloc.f32(tokens * W);
  const q = alloc.f32(tokens * heads * d);
  compute.qkv(qkv, w, x, tokens, hidden, q, keys, values, pages, pos, shape);
  return Buffer.concat([bytes(qkv), bytes(q), bytes(keys), bytes(values)]);
}

const QKV_CASES = [[1, 2, 1, 64, 128], [3, 4, 2, 10, 9], [4, 2, 1, 64, 128], [9, 6, 2, 14, 33], [40, 2, 1, 64, 128]] as const;

for (const simd of [false, true]) {
  test(`q/k/v and their prologue split by tokens are bit-identical to the serial compute (${simd ? 'SIMD kernel' : 'JS loops'})`, () =>
    assertSplitMatchesSerial(simd, QKV_CASES, (compute, alloc, [tokens, heads, kvHeads, d, hidden]) => qkvOn(compute, alloc, tokens, heads, kvHeads, d, hidden),
      ([tokens, heads, kvHeads, d, hidden]) => `tokens ${tokens} heads ${heads}/${kvHeads} d ${d} hidden ${hidden}`));
}
