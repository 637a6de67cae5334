// Float weights quantized to 4 bits and packed in each format's hub layout (GPTQ, AWQ, compressed-tensors
// pack-quantized): the inverse of int4-repack.ts, for the generated fixtures and tests (a checkpoint made from a seed
// with nothing outside the repository). The packing follows the same references: GPTQ's qweight along K and qzeros along
// N with v1's zero - 1 (GPTQModel PackableQuantLinear.pack), AWQ's order_map [0, 2, 4, 6, 1, 3, 5, 7] (AutoAWQ
// WQLinear_GEMM.from_linear), compressed-tensors' pack_to_int32 (q + 8 along K).
import type { TensorToWrite } from './safetensors-writer.ts';
import type { Int4ScaleType } from './quant.ts';
import { int4Scale } from './quant.ts';
import { REVERSE_AWQ_ORDER } from './int4-repack.ts';

/** A [N][K] weight in 4 bits: codes q [N][K] in 0 .. 15, scales [N][K/G] (16-bit patterns), zeros [N][K/G] or null (8). */
export interface Int4Weights {
  readonly N: number;
  readonly K: number;
  readonly G: number;
  readonly q: Uint8Array;
  readonly scales: Uint16Array;
  readonly scaleType: Int4ScaleType;
  readonly zeros: Uint8Array | null;
}

/** A positive float's nearest fp16 (normal or subnormal; clamped to 65504), as bits. */
export function f16Bits(v: number): number {
  if (!(v > 0)) return 0;
  if (v >= 65504) return 0x7bff;
  if (v < 2 ** -14) return Math.min(0x3ff, Math.round(v / 2 ** -24)) || 1;
  let e = Math.floor(Math.log2(v));
  let m = Math.round((v / 2 ** e - 1) * 1024);
  if (m === 1024) (m = 0), e++;
  return ((e + 15) << 10) | m;
}

/** A float's bf16 (round to nearest even), as bits. */
export function bf16BitsOf(v: number): number {
  const b = new Uint32Array(new Float32Array([v]).buffer)[0]!;
  return ((b + 0x7fff + ((b >> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * w ([N][K] row-major) in groups of G along K: symmetric, s = max |w| / 7 and q = round(w / s) + 8 clamped to 0 .. 15;
 * else s = (max - min) / 15, z = round(-min / s) (within [minZero, 15]) and q = round(w / s) + z clamped.
 */
export function quantizeInt4(w: ArrayLike<number>, N: number, K: number, G: number, opts: { symmetric: boolean; scaleType: Int4ScaleType; minZero?: number }): Int4Weights {
  const groups = K / G;
  const q = new Uint8Array(N * K), scales = new Uint16Array(N * groups);
  const zeros = opts.symmetric ? null : new Uint8Array(N * groups);
  const bits = opts.scaleType === 'f16' ? f16Bits : bf16BitsOf;
  for (let n = 0; n < N; n++) {
    for (let g = 0; g < groups; g++) {
      let lo = Infinity, hi = -Infinity;
      for (let k = g * G; k < (g + 1) * G; k++) (lo = Math.min(lo, w[n * K + k]!)), (hi = Math.max(hi, w[n * K + k]!));
      const want = opts.symmetric ? Math.max(Math.abs(lo), Math.abs(hi)) / 7 : (hi - lo) / 15;
      const sb = bits(want > 0 ? want : 1);
      const s = int4Scale(sb, opts.scaleType);
      const z = opts.symmetric ? 8 : Math.min(15, Math.max(opts.minZero ?? 0, Math.round(-lo / s)));
      scales[n * groups + g] = sb;
      if (zeros) zeros[n * groups + g] = z;
      for (let k = g * G; k < (g + 1) * G; k++) q[n * K + k] = Math.min(15, Math.max(0, Math.round(w[n * K + k]! / s) + z));
    }
  }
  return { N, K, G, q, scales, scaleType: opts.scaleType, zeros };
}

const scaleDtype = (x: Int4Weights): 'F16' | 'BF16' => (x.scaleType === 'f16' ? 'F16' : 'BF16');

/** 32-bit words as little-endian bytes. */
function wordBytes(w: Uint32Array): Uint8Array {
  return new Uint8Array(w.buffer, w.byteOffset, w.byteLength);
}

/** scales [N][groups] transposed to the [groups][N] GPTQ and AWQ store. */
function scalesByGroup(x: Int4Weights): Uint8Array {
  const groups = x.K / x.G;
  const out = new Uint16Array(groups * x.N);
  for (let n = 0; n < x.N; n++) for (let g = 0; g < groups; g++) out[g * x.N + n] = x.scales[n * groups + g]!;
  return new Uint8Array(out.buffer);
}

/** Zero points [groups][N/8] packed along N, column 8c + j at nibble order[j], each minus `offset` (4 bits kept). */
function packZeros(x: Int4Weights, order: readonly number[], offset: number): Uint8Array {
  const groups = x.K / x.G;
  const out = new Uint32Array((groups * x.N) / 8);
  for (let g = 0; g < groups; g++) {
    for (let n = 0; n < x.N; n++) {
      const z = (x.zeros ? x.zeros[n * groups + g]! : 8) - offset;
      out[g * (x.N / 8) + (n >> 3)]! |= ((z & 15) << (4 * order[n & 7]!)) >>> 0;
    }
  }
  return wordBytes(out);
}

/** GPTQ: X.qweight [K/8][N], X.qzeros [K/G][N/8] (v1: zero - 1), X.scales [K/G][N], X.g_idx [K]. */
export function packGptq(x: Int4Weights, module: string, v1 = true): TensorToWrite[] {
  const { N, K, G } = x;
  const qweight = new Uint32Array((K / 8) * N);
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) qweight[(k >> 3) * N + n]! |= (x.q[n * K + k]! << (4 * (k & 7))) >>> 0;
  const gIdx = Int32Array.from({ length: K }, (_, k) => Math.floor(k / G));
  return [
    { name: `${module}.qweight`, dtype: 'I32', shape: [K / 8, N], bytes: wordBytes(qweight) },
    { name: `${module}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: packZeros(x, [0, 1, 2, 3, 4, 5, 6, 7], v1 ? 1 : 0) },
    { name: `${module}.scales`, dtype: scaleDtype(x), shape: [K / G, N], bytes: scalesByGroup(x) },
    { name: `${module}.g_idx`, dtype: 'I32', shape: [K], bytes: new Uint8Array(gIdx.buffer) },
  ];
}

/** AWQ (GEMM): X.qweight [K][N/8] and X.qzeros [K/G][N/8] in AWQ's order, X.scales [K/G][N]. */
export function packAwq(x: Int4Weights, module: string): TensorToWrite[] {
  const { N, K, G } = x;
  const qweight = new Uint32Array(K * (N / 8));
  for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) qweight[k * (N / 8) + (n >> 3)]! |= (x.q[n * K + k]! << (4 * REVERSE_AWQ_ORDER[n & 7]!)) >>> 0;
  return [
    { name: `${module}.qweight`, dtype: 'I32', shape: [K, N / 8], bytes: wordBytes(qweight) },
    { name: `${module}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: packZeros(x, REVERSE_AWQ_ORDER, 0) },
    { name: `${module}.scales`, dtype: scaleDtype(x), shape: [K / G, N], bytes: scalesByGroup(x) },
  ];
}

/** compressed-tensors pack-quantized (symmetric): X.weight_packed [N][K/8], X.weight_scale [N][K/G], X.weight_shape. */
export function packCompressedTensors(x: Int4Weights, module: string, shapeDtype: 'I32' | 'I64' = 'I64'): TensorToWrite[] {
  const { N, K, G } = x;
  if (x.zeros) throw new Error('packCompressedTensors: pack-quantized int4 here is symmetric (no zero points)');
  const packed = new Uint32Array(N * (K / 8));
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) packed[n * (K / 8) + (k >> 3)]! |= (x.q[n * K + k]! << (4 * (k & 7))) >>> 0;
  const shape = shapeDtype === 'I64' ? new Uint8Array(BigInt64Array.from([BigInt(N), BigInt(K)]).buffer) : new Uint8Array(Int32Array.from([N, K]).buffer);
  return [
    { name: `${module}.weight_packed`, dtype: 'I32', shape: [N, K / 8], bytes: wordBytes(packed) },
    { name: `${module}.weight_scale`, dtype: scaleDtype(x), shape: [N, K / G], bytes: new Uint8Array(x.scales.slice().buffer) },
    { name: `${module}.weight_shape`, dtype: shapeDtype, shape: [2], bytes: shape },
  ];
}
