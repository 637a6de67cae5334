// Float32 bits and a seeded generator for the host lane's tests (host-expert-spec.test.ts, host-experts.test.ts).
import { mulberry32 } from '../../../util/rng.ts';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
export const bitsOf = (v: number): number => ((f32[0] = v), u32[0]!);
export const fromBits = (b: number): number => ((u32[0] = b >>> 0), f32[0]!);
export const isNaNBits = (b: number): boolean => (b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0;

export const rng = mulberry32;
export const int = (r: () => number, lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1)); // [lo, hi]
export const sign = (r: () => number): number => (r() < 0.5 ? -1 : 1);
/** A float32 with a random 24-bit significand and exponent e (2^e <= |v| < 2^(e+1); e in -126..127). */
export const f32With = (r: () => number, e: number): number => fromBits(((e + 127) << 23) | int(r, 0, 0x7fffff)) * sign(r);
export const hex = (v: number): string => `${v} (0x${bitsOf(v).toString(16).padStart(8, '0')})`;
