// Raw checkpoint tensors as float32, exactly (bf16 and f16 are subsets of f32), with the finite check. A leaf
// module (no family or architecture imports), so the families can use it whichever module loads first.

import { ResidencyError } from '../errors.ts';
import type { RawTensor } from './weights.ts';

/** f16 bit pattern -> f32 bit pattern, exact for normals, subnormals, infinities and NaN. */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0; // inf / NaN
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0; // rebias 15 -> 127
  if (mant === 0) return sign >>> 0; // +-0
  // Subnormal: shift the mantissa up until its leading 1 reaches the implicit bit.
  let e = 113;
  while ((mant & 0x400) === 0) {
    mant <<= 1;
    e--;
  }
  return (sign | (e << 23) | ((mant & 0x3ff) << 13)) >>> 0;
}

/** A weight that is NaN or infinite: the checkpoint is corrupt (served, it gives garbage or no tokens). */
function nonFinite(t: Pick<RawTensor, 'name' | 'shape'>, i: number, f32Bits: number): ResidencyError {
  const what = (f32Bits & 0x7fffff) !== 0 ? 'NaN' : f32Bits >>> 31 ? '-Infinity' : 'Infinity';
  return new ResidencyError('BAD_CHECKPOINT',
    `tensor "${t.name}": element ${i} of ${t.shape.join('x')} is ${what}; the checkpoint is corrupt (download or convert it again)`);
}

/**
 * One tensor as float32 (a fresh array, or `into`: memory the caller owns, of the tensor's length). Bytes are little-endian; they are assembled byte by byte
 * because a tensor's offset in its shard need not be aligned. Assumes a little-endian host (all targets).
 * `finite`: refuse a NaN or infinite value (BAD_CHECKPOINT naming the tensor), checked in the conversion
 * loop itself rather than in a second pass over the weights.
 */
export function tensorToFloat32(t: RawTensor, opts: { readonly finite?: boolean; readonly into?: Float32Array } = {}): Float32Array {
  const b = t.bytes;
  const finite = opts.finite === true;
  const alloc = (n: number): Float32Array => {
    if (!opts.into) return new Float32Array(n);
    if (opts.into.length !== n) throw new ResidencyError('INTERNAL', `tensorToFloat32: tensor "${t.name}" has ${n} values, its destination ${opts.into.length}`);
    return opts.into;
  };
  switch (t.dtype) {
    case 'BF16': {
      const n = b.length >> 1;
      const out = alloc(n);
      // bf16 is the top half of an f32: writing it into the high half of each f32 is exact.
      if (b.byteOffset % 2 === 0) {
        // Aligned (the usual case: safetensors pads its header to 8 bytes): 16-bit lanes, faster than bytes.
        const src = new Uint16Array(b.buffer, b.byteOffset, n);
        const dst = new Uint32Array(out.buffer, out.byteOffset, n);
        for (let i = 0; i < n; i++) {
          const h = src[i]!;
          if (finite && (h & 0x7f80) === 0x7f80) throw nonFinite(t, i, h << 16);
          dst[i] = h << 16;
        }
      } else {
        const bits = new Uint32Array(out.buffer, out.byteOffset, n);
        for (let i = 0; i < n; i++) {
          const f = ((b[2 * i]! | (b[2 * i + 1]! << 8)) << 16) >>> 0;
          if (finite && (f & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, f);
          bits[i] = f;
        }
      }
      return out;
    }
    case 'F16': {
      const n = b.length >> 1;
      const out = alloc(n);
      const bits = new Uint32Array(out.buffer, out.byteOffset, n);
      for (let i = 0; i < n; i++) {
        const f = f16BitsToF32Bits(b[2 * i]! | (b[2 * i + 1]! << 8));
        if (finite && (f & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, f);
        bits[i] = f;
      }
      return out;
    }
    case 'F32': {
      const out = alloc(b.length >> 2);
      new Uint8Array(out.buffer, out.byteOffset, out.byteLength).set(b);
      if (finite) {
        const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
        for (let i = 0; i < bits.length; i++) if ((bits[i]! & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, bits[i]!);
      }
      return out;
    }
    case 'U8': // packed data (MXFP4 blocks, scales) and FP8 values stay as stored (quant.ts)
    case 'F8_E4M3':
    case 'I32': // 4-bit packed words and their indices (int4-repack.ts)
    case 'I64':
      throw new ResidencyError('BAD_CHECKPOINT', `tensor "${t.name}" is ${t.dtype} where a float tensor (BF16, F16 or F32) is expected`);
  }
}

/**
 * A BF16 tensor's bit patterns as its own Uint16Array (kept as stored, RESIDENCY_CPU_BF16=stored), with the
 * same finite check as the float32 conversion.
 */
export function bf16Bits(t: RawTensor): Uint16Array {
  if (t.dtype !== 'BF16') throw new ResidencyError('INTERNAL', `bf16Bits: tensor "${t.name}" is ${t.dtype}`);
  const out = new Uint16Array(t.bytes.length >> 1);
  new Uint8Array(out.buffer).set(t.bytes);
  checkBf16Finite(t, out);
  return out;
}

/** Refuses a NaN or infinite value among `bits` (tensor `t`'s bf16 values, wherever they were read to). */
export function checkBf16Finite(t: Pick<RawTensor, 'name' | 'shape'>, bits: Uint16Array): void {
  for (let i = 0; i < bits.length; i++) if ((bits[i]! & 0x7f80) === 0x7f80) throw nonFinite(t, i, bits[i]! << 16);
}
