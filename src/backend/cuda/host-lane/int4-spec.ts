// The INT4 gemv's summation order, defined here before its kernel exists (as lane-spec.ts writes out the bf16, FP8 and
// MXFP4 gemv's), so the host lane (int4_dot.h) and the kernel to come compute an INT4 cold expert with the same bits.
// A row is quant.ts's Int4Matrix row: K values as K / 2 bytes (value c in byte c >> 1, low nibble first), a 16-bit
// scale (fp16 or bf16) and a zero point (or 8) a group of G consecutive values.
import { INT4_SYMMETRIC_ZERO, int4Scale, type Int4ScaleType } from '../../../model/quant.ts';
import { butterfly, fmaf32 } from './lane-spec.ts';

/** Where a row's groups' scales and zero points are. */
export interface Int4RowGroups {
  readonly scales: Uint16Array;
  /** Index of the row's first group in `scales` (and in `zeros`). */
  readonly at: number;
  readonly scaleType: Int4ScaleType;
  /** Zero points, or null: 8 for every group (symmetric). */
  readonly zeros: Uint8Array | null;
  /** Values a group (a multiple of 8: a word of values never spans two groups). */
  readonly group: number;
}

/** An INT4 weight: (q - z) x s, exact in float32 (|q - z| <= 16, s at most 11 significant bits). */
export function int4Value(q: number, z: number, s: number): number {
  return Math.fround((q - z) * s);
}

/**
 * One dot of the INT4 gemv: K values (K % 32 == 0) as K / 2 bytes from w[wOffset] with x. Lane c % 32 takes chunk c
 * (values 32c .. 32c + 31, one 16-byte load) in ascending c, and of it each word of 8 values in turn: each weight
 * w_e = (q_e - z) x s of the word's group (exact), d = w_0 x_0, d = fma(w_e, x_e, d) for e = 1 .. 7, acc = acc + d;
 * then the warp's butterfly (lane l adds lane l ^ o, o = 16 .. 1). The MXFP4 gemv's order (gpuDotMxfp4) with the
 * group's scale and zero point in place of the E8M0 scale.
 */
export function gpuDotInt4(w: Uint8Array, wOffset: number, g: Int4RowGroups, x: Float32Array, K: number): number {
  if (K % 32 !== 0) throw new Error(`gpuDotInt4: K ${K} is not a multiple of 32`);
  if (g.group % 8 !== 0) throw new Error(`gpuDotInt4: group ${g.group} is not a multiple of 8`);
  const acc = new Array<number>(32).fill(0);
  for (let c = 0; c < K / 32; c++) {
    let a = acc[c % 32]!;
    for (let i = 0; i < 4; i++) {
      const v = 32 * c + 8 * i, at = wOffset + v / 2, grp = g.at + Math.floor(v / g.group);
      const s = int4Scale(g.scales[grp]!, g.scaleType), z = g.zeros ? g.zeros[grp]! : INT4_SYMMETRIC_ZERO;
      let d = 0;
      for (let e = 0; e < 8; e++) {
        const b = w[at + (e >> 1)]!, wv = int4Value(e & 1 ? b >> 4 : b & 15, z, s);
        d = e === 0 ? Math.fround(wv * x[v]!) : fmaf32(wv, x[v + e]!, d);
      }
      a = Math.fround(a + d);
    }
    acc[c % 32] = a;
  }
  return butterfly(acc);
}
