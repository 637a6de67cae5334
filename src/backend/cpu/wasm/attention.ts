// attention-ops.ts `attentionHead` through the SIMD kernel: q.k scores and the weighted sum of values in
// wasm, the scale, max, exp and sum in JS (Math.exp; wasm has none) in the same order, so each head is
// bit-identical to the JS op. q, out, the KV caches and the scratch (scores, acc) live in the kernel's memory.
import type { SimdKernel } from './kernel.ts';

export function attentionHeadSimd(
  k: SimdKernel,
  out: Float32Array,
  outOff: number,
  q: Float32Array,
  qOff: number,
  kCache: Float32Array,
  vCache: Float32Array,
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
  k.scoresAt(scores.byteOffset, q.byteOffset + 4 * qh, kCache.byteOffset + 4 * kvOff, 4 * kvStride, d, pos + 1);
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
  k.wsumAt(acc.byteOffset, scores.byteOffset, vCache.byteOffset + 4 * kvOff, 4 * kvStride, d, pos + 1);
  for (let i = 0; i < d; i++) out[oh + i] = acc[i]! / sum;
}
