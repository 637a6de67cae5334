// The attention ops of the families beyond Qwen3 (attention-ops.ts keeps Qwen3's): RoPE tables with YaRN,
// interleaved RoPE (DeepSeek), attention with sinks and a sliding window (gpt-oss), and multi-head latent
// attention (DeepSeek-V3) computed the plain way: every head's key and value are expanded into the cache.
import { dot, rmsnorm } from './linalg.ts';
import { kvRow, ropeInvFreq, ropeTables, type KvPages } from './attention-ops.ts';
import { roundKvInPlace, type KvDtypeCode } from '../kv-dtype.ts';
import type { ModelSpec, YarnSpec } from '../../model/spec.ts';
import type { MlaWeights } from '../../model/weights.ts';
import type { Matrix } from '../../model/quant.ts';

/** y = W x for `rows` inputs (x [rows][inDim], y [rows][outDim]): a float32 or a quantized W (the backend's project). */
export type Project = (y: Float32Array, w: Matrix, x: Float32Array, rows: number, outDim: number, inDim: number) => void;

/** The RoPE tables of a spec ([positions][dim/2] cos and sin; dim = headDim, the rotary width). */
export function ropeTablesFor(spec: ModelSpec): { cos: Float32Array; sin: Float32Array } {
  const yarn = spec.rope?.yarn;
  if (!yarn) return ropeTables(spec.headDim, spec.ropeTheta, spec.maxPositions);
  const half = spec.headDim / 2;
  const invFreq = yarnInvFreq(spec.headDim, spec.ropeTheta, yarn);
  const scale = Math.fround(yarn.attentionFactor);
  const cos = new Float32Array(spec.maxPositions * half);
  const sin = new Float32Array(spec.maxPositions * half);
  for (let p = 0; p < spec.maxPositions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * invFreq[i]!);
      cos[p * half + i] = Math.fround(Math.cos(angle)) * scale;
      sin[p * half + i] = Math.fround(Math.sin(angle)) * scale;
    }
  }
  return { cos, sin };
}

/**
 * What RoPE a spec rotates by, as the CUDA kernels take it: the inverse frequencies (YaRN's or the default)
 * and the factor cos and sin are multiplied by (YaRN's attention factor, else 1). The same numbers the
 * tables above are made of.
 */
export function ropeFrequencies(spec: ModelSpec): { invFreq: Float32Array; scale: number } {
  const yarn = spec.rope?.yarn;
  if (!yarn) return { invFreq: ropeInvFreq(spec.headDim, spec.ropeTheta), scale: 1 };
  return { invFreq: yarnInvFreq(spec.headDim, spec.ropeTheta, yarn), scale: Math.fround(yarn.attentionFactor) };
}

/** transformers `_compute_yarn_parameters`' inverse frequencies, in its float32 steps. */
export function yarnInvFreq(dim: number, theta: number, y: YarnSpec): Float32Array {
  const f = Math.fround;
  const correctionDim = (rot: number): number => (dim * Math.log(y.originalMaxPositions / (rot * 2 * Math.PI))) / (2 * Math.log(theta));
  let low = correctionDim(y.betaFast);
  let high = correctionDim(y.betaSlow);
  if (y.truncate) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001;
  const half = dim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const posFreq = f(Math.pow(f(theta), f((2 * i) / dim)));
    const extrapolation = f(1 / posFreq);
    const interpolation = f(1 / f(y.factor * posFreq));
    const ramp = Math.min(Math.max(f(f(i - f(low)) / f(high - low)), 0), 1);
    const extrapolationFactor = f(1 - ramp);
    out[i] = f(f(interpolation * f(1 - extrapolationFactor)) + f(extrapolation * extrapolationFactor));
  }
  return out;
}

/**
 * Interleaved RoPE (DeepSeek rope_interleave) on x[off..off+d) in place: pair (2i, 2i+1) rotates by angle i,
 * and the result is stored de-interleaved (rotated evens, then rotated odds) as transformers leaves it; q and
 * k both are, so their dot products are unchanged.
 */
export function ropeInterleaved(x: Float32Array, off: number, d: number, cos: Float32Array, sin: Float32Array, pos: number, tmp: Float32Array): void {
  const half = d >> 1;
  const t = pos * half;
  for (let i = 0; i < half; i++) {
    const a = x[off + 2 * i]!;
    const b = x[off + 2 * i + 1]!;
    tmp[i] = a * cos[t + i]! - b * sin[t + i]!;
    tmp[half + i] = b * cos[t + i]! + a * sin[t + i]!;
  }
  for (let i = 0; i < d; i++) x[off + i] = tmp[i]!;
}

/** Where one head reads its query, keys and values, and how it attends. */
export interface HeadLayout {
  readonly qkDim: number;
  readonly vDim: number;
  readonly kStride: number;
  readonly vStride: number;
  readonly scale: number;
  /** Attend to the last `window` positions only (0: all). */
  readonly window: number;
}

/**
 * One head of causal attention at position `pos` over cached keys and values read through the sequence's block
 * table (table[tOff..], blocks of bs positions; attention-ops.ts kvRow), softmax in float64. With `sink`, the
 * head's sink logit joins the softmax and takes its share of the weight (gpt-oss).
 */
export function attendHead(
  out: Float32Array,
  outOff: number,
  q: Float32Array,
  qOff: number,
  kCache: Float32Array,
  kOff: number,
  vCache: Float32Array,
  vOff: number,
  table: Int32Array,
  tOff: number,
  bs: number,
  pos: number,
  o: HeadLayout,
  sink: number | undefined,
  scores: Float64Array,
  acc: Float64Array,
): void {
  const from = o.window > 0 ? Math.max(0, pos - o.window + 1) : 0;
  let max = sink ?? -Infinity;
  for (let p = from; p <= pos; p++) {
    const s = dot(q, qOff, kCache, kvRow(table, tOff, bs, p) * o.kStride + kOff, o.qkDim) * o.scale;
    scores[p] = s;
    if (s > max) max = s;
  }
  let sum = sink === undefined ? 0 : Math.exp(sink - max);
  for (let p = from; p <= pos; p++) {
    const e = Math.exp(scores[p]! - max);
    scores[p] = e;
    sum += e;
  }
  acc.fill(0, 0, o.vDim);
  for (let p = from; p <= pos; p++) {
    const e = scores[p]!;
    const v = kvRow(table, tOff, bs, p) * o.vStride + vOff;
    for (let i = 0; i < o.vDim; i++) acc[i] = acc[i]! + e * vCache[v + i]!;
  }
  for (let i = 0; i < o.vDim; i++) out[outOff + i] = acc[i]! / sum;
}

/**
 * Grouped-query attention of `tokens` tokens (as attention-ops.ts) with a sliding window and sinks:
 * token i's query at q[i*heads*d..), the layer's cache rows keys / values ([row][kvHeads*d]), its block table at
 * pages.table[pages.tableOf[i]..].
 */
export function attentionWindowed(
  out: Float32Array,
  q: Float32Array,
  tokens: number,
  keys: Float32Array,
  values: Float32Array,
  pages: KvPages,
  pos: Int32Array,
  heads: number,
  kvHeads: number,
  d: number,
  window: number,
  sinks: Float32Array | undefined,
  scores: Float64Array,
  acc: Float64Array,
): void {
  const group = heads / kvHeads;
  const layout: HeadLayout = { qkDim: d, vDim: d, kStride: kvHeads * d, vStride: kvHeads * d, scale: 1 / Math.sqrt(d), window };
  for (let i = 0; i < tokens; i++) {
    for (let h = 0; h < heads; h++) {
      const kv = ((h / group) | 0) * d;
      const at = i * heads * d + h * d;
      attendHead(out, at, q, at, keys, kv, values, kv, pages.table, pages.tableOf[i]!, pages.blockSize, pos[i]!, layout, sinks?.[h], scores, acc);
    }
  }
}

/** Per-step buffers of MLA for up to `tokens` tokens (from the backend's allocator: linear layers write them). */
export interface MlaScratch {
  readonly tokens: number;
  readonly qa: Float32Array; // [T][qLoraRank]
  readonly q: Float32Array; // [T][heads*(nope+rope)]
  readonly ckv: Float32Array; // [T][kvLoraRank+rope]
  readonly c: Float32Array; // [T][kvLoraRank] normed latent
  readonly kv: Float32Array; // [T][heads*(nope+v)]
  readonly rot: Float32Array; // [rope] scratch
}

export function mlaScratch(spec: ModelSpec, tokens: number, f32: (n: number) => Float32Array): MlaScratch {
  const m = spec.mla!;
  const nH = spec.numHeads;
  return {
    tokens,
    qa: f32(tokens * m.qLoraRank),
    q: f32(tokens * nH * (m.qkNopeDim + spec.headDim)),
    ckv: f32(tokens * (m.kvLoraRank + spec.headDim)),
    c: f32(tokens * m.kvLoraRank),
    kv: f32(tokens * nH * (m.qkNopeDim + m.vHeadDim)),
    rot: new Float32Array(spec.headDim),
  };
}

/**
 * DeepSeek-V3 attention of `tokens` tokens (transformers DeepseekV3Attention, eager): q = q_b(norm(q_a x)),
 * [c, k_rot] = kv_a x, [k_nope, v] = kv_b(norm(c)) per head; RoPE (interleaved) on q's and k's rope parts,
 * k_rot shared by every head; each head's key [k_nope, k_rot] and value go to the cache at its position's row,
 * then softmax(q.k / sqrt(nope+rope)) over positions 0..pos. Writes [T][heads*v] to `out`. The four
 * projections go through `project` (float32 or block FP8 as stored).
 * What a device keeps is the latent, norm(c) and the roped k_rot (the CUDA backend's latent cache): those are
 * rounded as stored (kv-dtype.ts) before anything is computed from them, so the expanded keys and values here are
 * what the stored latent gives.
 */
export function mlaAttention(
  out: Float32Array,
  xn: Float32Array,
  tokens: number,
  w: MlaWeights,
  spec: ModelSpec,
  s: MlaScratch,
  pos: Int32Array,
  keys: Float32Array,
  values: Float32Array,
  pages: KvPages,
  kvDtype: KvDtypeCode,
  project: Project,
  cos: Float32Array,
  sin: Float32Array,
  scores: Float64Array,
  acc: Float64Array,
): void {
  const m = spec.mla!;
  const H = spec.hiddenSize;
  const nH = spec.numHeads;
  const rope = spec.headDim;
  const nope = m.qkNopeDim;
  const qk = nope + rope;
  const vd = m.vHeadDim;
  const kvA = m.kvLoraRank + rope;
  const eps = spec.rmsNormEps;
  project(s.qa, w.qA, xn, tokens, m.qLoraRank, H);
  for (let i = 0; i < tokens; i++) rmsnorm(s.qa, i * m.qLoraRank, s.qa, i * m.qLoraRank, w.qANorm, m.qLoraRank, eps);
  project(s.q, w.qB, s.qa, tokens, nH * qk, m.qLoraRank);
  project(s.ckv, w.kvA, xn, tokens, kvA, H);
  for (let i = 0; i < tokens; i++) {
    rmsnorm(s.c, i * m.kvLoraRank, s.ckv, i * kvA, w.kvANorm, m.kvLoraRank, eps);
    roundKvInPlace(kvDtype, s.c, i * m.kvLoraRank, m.kvLoraRank);
  }
  project(s.kv, w.kvB, s.c, tokens, nH * (nope + vd), m.kvLoraRank);
  for (let i = 0; i < tokens; i++) {
    const p = pos[i]!;
    const r = pages.rowOf[i]!;
    for (let h = 0; h < nH; h++) ropeInterleaved(s.q, i * nH * qk + h * qk + nope, rope, cos, sin, p, s.rot);
    ropeInterleaved(s.ckv, i * kvA + m.kvLoraRank, rope, cos, sin, p, s.rot);
    roundKvInPlace(kvDtype, s.ckv, i * kvA + m.kvLoraRank, rope);
    for (let h = 0; h < nH; h++) {
      const src = i * nH * (nope + vd) + h * (nope + vd);
      keys.set(s.kv.subarray(src, src + nope), r * nH * qk + h * qk);
      keys.set(s.ckv.subarray(i * kvA + m.kvLoraRank, i * kvA + kvA), r * nH * qk + h * qk + nope);
      values.set(s.kv.subarray(src + nope, src + nope + vd), r * nH * vd + h * vd);
    }
  }
  const layout: HeadLayout = { qkDim: qk, vDim: vd, kStride: nH * qk, vStride: nH * vd, scale: m.softmaxScale, window: 0 };
  for (let i = 0; i < tokens; i++) {
    for (let h = 0; h < nH; h++) {
      attendHead(out, i * nH * vd + h * vd, s.q, i * nH * qk + h * qk, keys, h * qk, values, h * vd, pages.table, pages.tableOf[i]!, pages.blockSize, pos[i]!, layout, undefined, scores, acc);
    }
  }
}
