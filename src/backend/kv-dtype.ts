// How keys and values are rounded when a backend stores them (--kv-cache-dtype, vLLM's names): the one definition
// the CPU spec applies and the CUDA kernels copy, so a value read back is the same bits on every backend.
//   float32:  stored as computed.
//   bfloat16: float32 -> bfloat16 round to nearest, ties to even (__float2bfloat16_rn, torch's .to(bfloat16));
//             NaN stays NaN, a value past the largest bf16 becomes infinite, as RNE gives.
//   fp8:      float8 e4m3fn with a per-tensor float32 scale, as vLLM's fp8 KV cache (scaled_convert): stored
//             byte = cvt.rn.satfinite.e4m3(x / scale) (__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3)),
//             read back as float32(e4m3) x scale. Round to nearest, ties to even, subnormals kept (multiples of
//             2^-9 below 2^-6); |x / scale| past 448, infinities included, saturates to +-448; NaN stays NaN (0x7F).
//             The scale is 1 (vLLM's k_scale / v_scale default where the checkpoint calibrates none).
import { ResidencyError } from '../errors.ts';
import type { KvCacheDtype } from './backend.ts';

/** The dtypes by code (what a worker thread or a kernel argument carries). */
export type KvDtypeCode = 0 | 1 | 2;
export const KV_DTYPES: readonly KvCacheDtype[] = ['float32', 'bfloat16', 'fp8'];

export function kvDtypeCode(dtype: KvCacheDtype): KvDtypeCode {
  return KV_DTYPES.indexOf(dtype) as KvDtypeCode;
}

/** Bytes one stored value takes on a device that keeps the dtype as is. */
export const KV_DTYPE_BYTES: Readonly<Record<KvCacheDtype, number>> = { float32: 4, bfloat16: 2, fp8: 1 };

/** The largest finite e4m3fn magnitude. */
export const E4M3_MAX = 448;

/** The fp8 scale every layer's keys and values use (vLLM's default without calibrated scales). */
export const FP8_KV_SCALE = 1;

/**
 * `--kv-cache-dtype` as given (vLLM's names: auto, float32, bfloat16, fp8 = fp8_e4m3), `auto` resolved to the
 * backend's own default.
 */
export function parseKvCacheDtype(text: string, auto: KvCacheDtype): KvCacheDtype {
  const t = text.trim().toLowerCase();
  if (t === 'auto') return auto;
  if (t === 'float32' || t === 'bfloat16') return t;
  if (t === 'fp8' || t === 'fp8_e4m3') return 'fp8';
  throw new ResidencyError('BAD_ARGUMENT', `--kv-cache-dtype '${text}': expected auto, float32, bfloat16 or fp8 (fp8_e4m3)`);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN. */
export function bf16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  if ((b & 0x7fffffff) > 0x7f800000) return (b >>> 16) | 0x40;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/** x rounded to bfloat16 (the float32 the stored bf16 widens to, exactly). */
export function roundBf16(x: number): number {
  u32[0] = bf16Bits(x) << 16;
  return f32[0]!;
}

/** float32 -> e4m3fn byte, round to nearest even, saturating to +-448, NaN -> 0x7F (cvt.rn.satfinite.e4m3x2.f32). */
export function e4m3Byte(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  const sign = (b >>> 24) & 0x80;
  const abs = b & 0x7fffffff;
  if (abs > 0x7f800000) return 0x7f;
  u32[0] = abs;
  const a = f32[0]!;
  if (a > E4M3_MAX) return sign | 0x7e;
  if (a < 2 ** -6) return sign | rne(a * 512); // subnormals: multiples of 2^-9 (8 rounds up to 2^-6, code 0x08)
  const exp = (abs >>> 23) - 127;
  let keep = (abs >>> 20) & 7;
  const rem = abs & 0xfffff;
  if (rem > 0x80000 || (rem === 0x80000 && (keep & 1) === 1)) keep++;
  let e = exp + 7;
  if (keep === 8) {
    keep = 0;
    e++;
  }
  return sign | (e << 3) | keep;
}

/** The value of an e4m3fn byte (0x7F / 0xFF: NaN). */
export function e4m3Value(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1;
  const e = (byte >> 3) & 15;
  const m = byte & 7;
  if ((byte & 0x7f) === 0x7f) return NaN;
  return sign * (e === 0 ? m * 2 ** -9 : (1 + m / 8) * 2 ** (e - 7));
}

/** x stored as fp8 with `scale` and read back: float32(e4m3(float32(x / scale))) x scale, in float32. */
export function roundFp8(x: number, scale = FP8_KV_SCALE): number {
  const v = e4m3Value(e4m3Byte(Math.fround(x / scale)));
  return scale === 1 ? v : Math.fround(v * scale);
}

/** x as the dtype stores it and reads it back. */
export function roundKv(code: KvDtypeCode, x: number): number {
  return code === 0 ? x : code === 1 ? roundBf16(x) : roundFp8(x);
}

/** a[off..off+n) rounded as stored, in place (float32: untouched). */
export function roundKvInPlace(code: KvDtypeCode, a: Float32Array, off: number, n: number): void {
  if (code === 0) return;
  if (code === 1) for (let i = off; i < off + n; i++) a[i] = roundBf16(a[i]!);
  else for (let i = off; i < off + n; i++) a[i] = roundFp8(a[i]!);
}

/** Round half to even of a non-negative number. */
function rne(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  return d > 0.5 || (d === 0.5 && f % 2 === 1) ? f + 1 : f;
}
