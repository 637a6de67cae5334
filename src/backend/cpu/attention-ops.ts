// The attention ops of the CPU reference: RoPE as transformers applies it for Qwen3, per-head RMSNorm
// (q_norm / k_norm), and causal grouped-query attention over a paged KV cache: a layer's keys (values) are one
// array of rows, [blocks x blockSize][width], and a sequence's position p is row table[tOff + p / bs] x bs + p % bs.
import { dot, rmsnorm } from './linalg.ts';
import { roundKvInPlace, type KvDtypeCode } from '../kv-dtype.ts';

/**
 * RoPE tables as transformers builds them for Qwen3, in float32: inv_freq[i] = 1 / theta^(2i/d),
 * angle = pos * inv_freq, cos/sin of the float32 angle. Returns [positions][d/2] each (the two halves
 * of the rotate-half layout share a value, so half the table is enough).
 */
export function ropeTables(headDim: number, theta: number, positions: number): { cos: Float32Array; sin: Float32Array } {
  const half = headDim / 2;
  const invFreq = ropeInvFreq(headDim, theta);
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * invFreq[i]!);
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** Default RoPE's inverse frequencies [headDim / 2] in transformers' float32 steps: 1 / theta^(2i / d). */
export function ropeInvFreq(headDim: number, theta: number): Float32Array {
  const invFreq = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const exponent = Math.fround((2 * i) / headDim);
    invFreq[i] = Math.fround(1 / Math.fround(Math.pow(theta, exponent)));
  }
  return invFreq;
}

/** Rotate-half RoPE on one head vector x[off..off+d) in place, at table row `pos`. */
export function rope(x: Float32Array, off: number, d: number, cos: Float32Array, sin: Float32Array, pos: number): void {
  const half = d >> 1;
  const t = pos * half;
  for (let i = 0; i < half; i++) {
    const c = cos[t + i]!;
    const s = sin[t + i]!;
    const a = x[off + i]!;
    const b = x[off + half + i]!;
    x[off + i] = a * c - b * s;
    x[off + half + i] = b * c + a * s;
  }
}

/** RMSNorm over each of `heads` head vectors of size d starting at off (q_norm / k_norm), in place. */
export function headNorm(x: Float32Array, off: number, heads: number, d: number, weight: Float32Array, eps: number): void {
  for (let h = 0; h < heads; h++) rmsnorm(x, off + h * d, x, off + h * d, weight, d, eps);
}

/** Where Qwen3's attention prologue reads and writes (qkvPrologue): head counts, head size, q/k norm weights, RoPE tables. */
export interface QkvShape {
  readonly heads: number;
  readonly kvHeads: number;
  readonly d: number;
  readonly qNorm: Float32Array;
  readonly kNorm: Float32Array;
  readonly eps: number;
  readonly cos: Float32Array;
  readonly sin: Float32Array;
  /** How keys and values are rounded as they are stored (kv-dtype.ts code). */
  readonly kvDtype: KvDtypeCode;
}

/**
 * Where a step's tokens read and write a paged layer cache: token i's block table starts at table[tableOf[i]]
 * (blocks of blockSize positions), and its own position's row is rowOf[i].
 */
export interface KvPages {
  readonly table: Int32Array;
  readonly tableOf: Int32Array;
  readonly rowOf: Int32Array;
  readonly blockSize: number;
}

/** The cache row of position p of a sequence whose block table starts at table[tOff] (blocks of bs positions). */
export function kvRow(table: Int32Array, tOff: number, bs: number, p: number): number {
  return table[tOff + ((p / bs) | 0)]! * bs + (p % bs);
}

/**
 * Qwen3's attention prologue for token i from its row of the stacked q|k|v projection ([T][(heads + 2 kvHeads) d]):
 * q = RoPE(q_norm(q)) into q[i], k = RoPE(k_norm(k)) and v into the caches' row `row` (its position `pos`'s row
 * through the block table), rounded as stored (kv-dtype.ts). The same ops as headNorm then rope in place (a head's
 * norm reads all of it before writing), so threads may take any tokens.
 */
export function qkvPrologue(qkv: Float32Array, q: Float32Array, keys: Float32Array, values: Float32Array, i: number, pos: number, row: number, s: QkvShape): void {
  const { heads, kvHeads, d } = s;
  const qW = heads * d;
  const kvW = kvHeads * d;
  const at = i * (qW + 2 * kvW);
  for (let h = 0; h < heads; h++) {
    rmsnorm(q, i * qW + h * d, qkv, at + h * d, s.qNorm, d, s.eps);
    rope(q, i * qW + h * d, d, s.cos, s.sin, pos);
  }
  for (let h = 0; h < kvHeads; h++) {
    rmsnorm(keys, row * kvW + h * d, qkv, at + qW + h * d, s.kNorm, d, s.eps);
    rope(keys, row * kvW + h * d, d, s.cos, s.sin, pos);
  }
  values.set(qkv.subarray(at + qW + kvW, at + qW + 2 * kvW), row * kvW);
  roundKvInPlace(s.kvDtype, keys, row * kvW, kvW);
  roundKvInPlace(s.kvDtype, values, row * kvW, kvW);
}

/**
 * Causal grouped-query attention of one token at position `pos` over cached keys/values 0..pos, read through its
 * block table (table[tOff..], blocks of bs positions). q: [numHeads][d] at qOff; kCache/vCache: rows of
 * [numKvHeads*d]; out: [numHeads][d] at outOff. scores: scratch of at least pos+1 float64, acc: scratch of d float64.
 * Softmax in float64, scale 1/sqrt(d).
 */
export function attention(
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
  numHeads: number,
  numKvHeads: number,
  d: number,
  scores: Float64Array,
  acc: Float64Array,
): void {
  for (let h = 0; h < numHeads; h++) attentionHead(out, outOff, q, qOff, kCache, vCache, table, tOff, bs, pos, h, numHeads, numKvHeads, d, scores, acc);
}

/**
 * Head `h` of `attention` (heads are independent, so threads may split a token's heads between them;
 * each head is computed by this same code either way). Positions are visited in order, a block at a time.
 */
export function attentionHead(
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
  let max = -Infinity;
  for (let p = 0, b = tOff; p <= pos; b++) {
    const end = Math.min(p + bs, pos + 1);
    for (let r = table[b]! * bs; p < end; p++, r++) {
      const s = dot(q, qh, kCache, r * kvStride + kvOff, d) * scale;
      scores[p] = s;
      if (s > max) max = s;
    }
  }
  let sum = 0;
  for (let p = 0; p <= pos; p++) {
    const e = Math.exp(scores[p]! - max);
    scores[p] = e;
    sum += e;
  }
  // Sum the values position by position (rows of the cache are contiguous), each output over p in order.
  const oh = outOff + h * d;
  acc.fill(0, 0, d);
  for (let p = 0, b = tOff; p <= pos; b++) {
    const end = Math.min(p + bs, pos + 1);
    for (let r = table[b]! * bs; p < end; p++, r++) {
      const e = scores[p]!;
      const v = r * kvStride + kvOff;
      for (let i = 0; i < d; i++) acc[i] = acc[i]! + e * vCache[v + i]!;
    }
  }
  for (let i = 0; i < d; i++) out[oh + i] = acc[i]! / sum;
}
