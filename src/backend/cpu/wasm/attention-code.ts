// The SIMD attention kernels' code (assembled into module.ts), each reproducing attention-ops.ts
// `attentionHead` exactly:
//   attn_scores(out, q, k, kStride, d, count): out[p] (float64) = dot(q, k + p*kStride, d) for p < count,
//     in linalg.ts `dot`'s order (lanes (s0, s1), (s2, s3); s0 + s1 + (s2 + s3); tail on s0).
//   attn_wsum(acc, e, v, vStride, d, count): acc[i] (float64) = acc[i] + e[p] * v[p*vStride + i] for
//     p < count in order (each element's sum runs over p exactly as the JS loop does; lanes are elements).
// Addresses and strides in bytes.
import {
  ADD, AND, BLOCK, EQZ, END, F64_ZERO2, FADD, FMUL, LOOP, LT_U, MUL, PROMOTE, PROMOTE_LOW, SPLAT, VADD, VMUL,
  brIf, f32Load, f64Load, f64Store, get, i32c, lane, load64Zero, set, tee, v128Load, v128Store, u32, I32, F64, V128, vec,
} from './asm.ts';

/** Loop `body` while local `cur` < local `end` (tested before the first pass). */
const whileLt = (cur: number, end: number, body: number[]): number[] => [
  ...BLOCK, ...get(cur), ...get(end), LT_U, EQZ, ...brIf(0),
  ...LOOP, ...body, ...get(cur), ...get(end), LT_U, ...brIf(0), END,
  END,
];

const bump = (l: number, n: number): number[] => [...get(l), ...i32c(n), ADD, ...set(l)];

// attn_scores: params OUT Q K KS D N; locals.
const [OUT, Q, K, KS, D, N] = [0, 1, 2, 3, 4, 5];
const [P, A, B, AEND, TEND, OUTC] = [6, 7, 8, 9, 10, 11];
const [ACC01, ACC23] = [12, 13];
const [S0, S1, S2, S3] = [14, 15, 16, 17];

const pair = (acc: number, off: number): number[] => [
  ...get(acc),
  ...get(A), ...load64Zero(off), ...PROMOTE_LOW,
  ...get(B), ...load64Zero(off), ...PROMOTE_LOW,
  ...VMUL, ...VADD, ...set(acc),
];

const scoresBody: number[] = [
  // AEND = q + (d & ~3)*4; TEND = q + d*4; OUTC = out; P = 0
  ...get(Q), ...get(D), ...i32c(-4), AND, ...i32c(4), MUL, ADD, ...set(AEND),
  ...get(Q), ...get(D), ...i32c(4), MUL, ADD, ...set(TEND),
  ...get(OUT), ...set(OUTC),
  ...i32c(0), ...set(P),
  ...whileLt(P, N, [
    ...F64_ZERO2, ...set(ACC01),
    ...F64_ZERO2, ...set(ACC23),
    ...get(Q), ...set(A),
    ...get(K), ...get(P), ...get(KS), MUL, ADD, ...set(B),
    ...whileLt(A, AEND, [...pair(ACC01, 0), ...pair(ACC23, 8), ...bump(A, 16), ...bump(B, 16)]),
    ...get(ACC01), ...lane(0), ...set(S0),
    ...get(ACC01), ...lane(1), ...set(S1),
    ...get(ACC23), ...lane(0), ...set(S2),
    ...get(ACC23), ...lane(1), ...set(S3),
    ...whileLt(A, TEND, [
      ...get(S0), ...get(A), ...f32Load(0), PROMOTE, ...get(B), ...f32Load(0), PROMOTE, FMUL, FADD, ...set(S0),
      ...bump(A, 4), ...bump(B, 4),
    ]),
    ...get(OUTC), ...get(S0), ...get(S1), FADD, ...get(S2), ...get(S3), FADD, FADD, ...f64Store,
    ...bump(OUTC, 8),
    ...bump(P, 1),
  ]),
  END,
];

export const scoresCode = [...vec([[...u32(6), I32], [...u32(2), V128], [...u32(4), F64]]), ...scoresBody];

// attn_wsum: params ACC E V VS D N; locals.
const [WACC, WE, WV, WVS, WD, WN] = [0, 1, 2, 3, 4, 5];
const [WP, AC, VC, PEND, WTEND] = [6, 7, 8, 9, 10];
const EV = 11; // v128: e splat
const EF = 12; // f64: e

const wsumBody: number[] = [
  // PEND = acc + (d & ~1)*8; WTEND = acc + d*8
  ...get(WACC), ...get(WD), ...i32c(-2), AND, ...i32c(8), MUL, ADD, ...set(PEND),
  ...get(WACC), ...get(WD), ...i32c(8), MUL, ADD, ...set(WTEND),
  ...i32c(0), ...set(WP),
  ...whileLt(WP, WN, [
    ...get(WE), ...get(WP), ...i32c(8), MUL, ADD, ...f64Load(0), ...tee(EF), ...SPLAT, ...set(EV),
    ...get(WV), ...get(WP), ...get(WVS), MUL, ADD, ...set(VC),
    ...get(WACC), ...set(AC),
    // Two elements at a time: acc[i..i+2) = acc + e * promote(v pair).
    ...whileLt(AC, PEND, [
      ...get(AC),
      ...get(AC), ...v128Load,
      ...get(EV), ...get(VC), ...load64Zero(0), ...PROMOTE_LOW, ...VMUL,
      ...VADD, ...v128Store,
      ...bump(AC, 16), ...bump(VC, 8),
    ]),
    // Odd d: the last element.
    ...whileLt(AC, WTEND, [
      ...get(AC),
      ...get(AC), ...f64Load(0),
      ...get(EF), ...get(VC), ...f32Load(0), PROMOTE, FMUL,
      FADD, ...f64Store,
      ...bump(AC, 8), ...bump(VC, 4),
    ]),
    ...bump(WP, 1),
  ]),
  END,
];

export const wsumCode = [...vec([[...u32(5), I32], [...u32(1), V128], [...u32(1), F64]]), ...wsumBody];
