// attention-ops.ts `attentionHead` through the SIMD kernel: q.k scores and the weighted sum of values in
// wasm, the scale, max, exp and sum in JS (Math.exp; wasm has none) in the same order, so each head is
// bit-identical to the JS op. q, out, the KV caches and the scratch (scores, acc) live in the kernel's memory.
// The cache is paged: the kernel runs over each stretch of consecutive rows (a block, or blocks whose ids follow
// each other), positions still in order, so each score and each sum is the same as over one contiguous cache.
import type { SimdKernel } from './kernel.ts';

export function attentionHeadSimd(
  k: SimdKernel,
  out: Float32Array,
  outOff: number,
  q: Float32Array,
  qOff: number,
  kCache: Float32Array,
  vCache: Float32Array,
  table: Int32Array,
  tOff: number,
  bs: number,
  pos: number,
  h: number,
  numHeads: number,
  numKvHeads: number,
  d: number,
  scores: Float64Array,
  acc: Float64Array,
): void {
  const group = numHeads / numKvHeads;
  const kvStride = numKvHeads * d;
  const scale = 1 / Math.sqrt(d);
  const kvOff = ((h / group) | 0) * d;
  const qh = qOff + h * d;
  const rowBytes = 4 * kvStride;
  const kBase = kCache.byteOffset + 4 * kvOff;
  const vBase = vCache.byteOffset + 4 * kvOff;
  // Stretches of consecutive rows: [position, row, count].
  forEachStretch(table, tOff, bs, pos, (p, row, n) => k.scoresAt(scores.byteOffset + 8 * p, q.byteOffset + 4 * qh, kBase + row * rowBytes, rowBytes, d, n));
  let max = -Infinity;
  for (let p = 0; p <= pos; p++) {
    const s = scores[p]! * scale;
    scores[p] = s;
    if (s > max) max = s;
  }
  let sum = 0;
  for (let p = 0; p <= pos; p++) {
    const e = Math.exp(scores[p]! - max);
    scores[p] = e;
    sum += e;
  }
  const oh = outOff + h * d;
  acc.fill(0, 0, d);
  forEachStretch(table, tOff, bs, pos, (p, row, n) => k.wsumAt(acc.byteOffset, scores.byteOffset + 8 * p, vBase + row * rowBytes, rowBytes, d, n));
  for (let i = 0; i < d; i++) out[oh + i] = acc[i]! / sum;
}

/** Calls f(first position, its row, positions) for each stretch of positions 0..pos whose rows are consecutive. */
function forEachStretch(table: Int32Array, tOff: number, bs: number, pos: number, f: (p: number, row: number, n: number) => void): void {
  let p = 0;
  let b = tOff;
  while (p <= pos) {
    const row = table[b]! * bs;
    let n = Math.min(bs, pos + 1 - p);
    // Following blocks whose ids follow on: one stretch.
    while (p + n <= pos && n % bs === 0 && table[b + n / bs] === table[b]! + n / bs) n += Math.min(bs, pos + 1 - p - n);
    f(p, row, n);
    p += n;
    b += Math.ceil(n / bs);
  }
}
