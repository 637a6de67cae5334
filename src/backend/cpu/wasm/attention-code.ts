// The SIMD attention kernels' code (assembled into module.ts), each reproducing attention-ops.ts
// `attentionHead` exactly:
//   attn_scores(out, q, k, kStride, d, count): out[p] (float64) = dot(q, k + p*kStride, d) for p < count,
//     in linalg.ts `dot`'s order (lanes (s0, s1), (s2, s3); s0 + s1 + (s2 + s3); tail on s0).
//   attn_wsum(acc, e, v, vStride, d, count): acc[i] (float64) = acc[i] + e[p] * v[p*vStride + i] for
//     p < count in order (each element's sum runs over p exactly as the JS loop does; lanes are elements).
// Addresses and strides in bytes. Scores go two positions at a time (q's loads shared), the weighted sum in
// blocks of 8 elements held in registers over all positions; neither changes any sum's order.
import {
  ADD, AND, BLOCK, EQZ, END, F64_ZERO2, FADD, FMUL, LOOP, LT_U, MUL, PROMOTE, PROMOTE_LOW, SPLAT, VADD, VMUL,
  exactMulAdd, brIf, f32Load, f64Load, f64Store, f64StoreAt, get, i32c, lane, load64Zero, set, tee, v128Load,
  v128LoadAt, v128Store, v128StoreAt, u32, I32, F64, V128, vec, whileLt, bump,
} from './asm.ts';

// attn_scores: params OUT Q K KS D N; locals.
const [OUT, Q, K, KS, D, N] = [0, 1, 2, 3, 4, 5];
const [P, A, B, AEND, TEND, OUTC] = [6, 7, 8, 9, 10, 11];
const [ACC01, ACC23] = [12, 13];
const [S0, S1, S2, S3] = [14, 15, 16, 17];

const pair = (acc: number, off: number, fma: boolean): number[] =>
  exactMulAdd(acc, [...get(A), ...load64Zero(off), ...PROMOTE_LOW], [...get(B), ...load64Zero(off), ...PROMOTE_LOW], fma);

// Two positions at once (p and p+1 against the same q, each in `dot`'s exact order): the second key row's cursor,
// lanes and scalars, and q's pairs promoted once for both.
const B2 = 18; // i32
const [BCC01, BCC23, QP0, QP1] = [19, 20, 21, 22]; // v128
const [T0, T1, T2, T3] = [23, 24, 25, 26]; // f64

const pairWith = (acc: number, cursor: number, off: number, qp: number, fma: boolean): number[] =>
  exactMulAdd(acc, [...get(cursor), ...load64Zero(off), ...PROMOTE_LOW], get(qp), fma);
const tailStep = (s: number, cursor: number): number[] => [
  ...get(s), ...get(A), ...f32Load(0), PROMOTE, ...get(cursor), ...f32Load(0), PROMOTE, FMUL, FADD, ...set(s),
];
const storeSum = (a: number, b: number, c: number, d: number, off: number): number[] => [
  ...get(OUTC), ...get(a), ...get(b), FADD, ...get(c), ...get(d), FADD, FADD, ...f64StoreAt(off),
];

const scoresBody = (fma: boolean): number[] => [
  // AEND = q + (d & ~3)*4; TEND = q + d*4; OUTC = out; P = 0
  ...get(Q), ...get(D), ...i32c(-4), AND, ...i32c(4), MUL, ADD, ...set(AEND),
  ...get(Q), ...get(D), ...i32c(4), MUL, ADD, ...set(TEND),
  ...get(OUT), ...set(OUTC),
  ...i32c(0), ...set(P),
  // Pairs of positions: while p + 1 < count.
  ...BLOCK, ...get(P), ...i32c(1), ADD, ...get(N), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...F64_ZERO2, ...set(ACC01),
  ...F64_ZERO2, ...set(ACC23),
  ...F64_ZERO2, ...set(BCC01),
  ...F64_ZERO2, ...set(BCC23),
  ...get(Q), ...set(A),
  ...get(K), ...get(P), ...get(KS), MUL, ADD, ...tee(B), ...get(KS), ADD, ...set(B2),
  ...whileLt(A, AEND, [
    ...get(A), ...load64Zero(0), ...PROMOTE_LOW, ...set(QP0),
    ...get(A), ...load64Zero(8), ...PROMOTE_LOW, ...set(QP1),
    ...pairWith(ACC01, B, 0, QP0, fma), ...pairWith(BCC01, B2, 0, QP0, fma),
    ...pairWith(ACC23, B, 8, QP1, fma), ...pairWith(BCC23, B2, 8, QP1, fma),
    ...bump(A, 16), ...bump(B, 16), ...bump(B2, 16),
  ]),
  ...get(ACC01), ...lane(0), ...set(S0),
  ...get(ACC01), ...lane(1), ...set(S1),
  ...get(ACC23), ...lane(0), ...set(S2),
  ...get(ACC23), ...lane(1), ...set(S3),
  ...get(BCC01), ...lane(0), ...set(T0),
  ...get(BCC01), ...lane(1), ...set(T1),
  ...get(BCC23), ...lane(0), ...set(T2),
  ...get(BCC23), ...lane(1), ...set(T3),
  // (dot's product order is w * x with w the first argument: here q, as in the single-position loop below.)
  ...whileLt(A, TEND, [...tailStep(S0, B), ...tailStep(T0, B2), ...bump(A, 4), ...bump(B, 4), ...bump(B2, 4)]),
  ...storeSum(S0, S1, S2, S3, 0),
  ...storeSum(T0, T1, T2, T3, 8),
  ...bump(OUTC, 16),
  ...bump(P, 2),
  ...get(P), ...i32c(1), ADD, ...get(N), LT_U, ...brIf(0),
  END,
  END,
  // The last position when count is odd.
  ...whileLt(P, N, [
    ...F64_ZERO2, ...set(ACC01),
    ...F64_ZERO2, ...set(ACC23),
    ...get(Q), ...set(A),
    ...get(K), ...get(P), ...get(KS), MUL, ADD, ...set(B),
    ...whileLt(A, AEND, [...pair(ACC01, 0, fma), ...pair(ACC23, 8, fma), ...bump(A, 16), ...bump(B, 16)]),
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

/** attn_scores' code; `fma`: the products' adds fused (asm.ts exactMulAdd: q and k are float32, the same sums). */
export const scoresCode = (fma: boolean): number[] => [...vec([[...u32(6), I32], [...u32(2), V128], [...u32(4), F64], [...u32(1), I32], [...u32(4), V128], [...u32(4), F64]]), ...scoresBody(fma)];

// attn_wsum: params ACC E V VS D N; locals.
const [WACC, WE, WV, WVS, WD, WN] = [0, 1, 2, 3, 4, 5];
const [WP, AC, VC, PEND, WTEND] = [6, 7, 8, 9, 10];
const EV = 11; // v128: e splat
const EF = 12; // f64: e

// Blocks of 8 elements held in registers across positions (the acc round trip through memory per position was
// most of the cost): i32 locals, then the 4 lanes.
const [BEND, AB, VB, EC, VREM] = [13, 14, 15, 16, 17];
const [L0, L1, L2, L3] = [18, 19, 20, 21];
const LANES = [L0, L1, L2, L3];

const wsumBody: number[] = [
  // BEND = acc + (d & ~7)*8; VREM = v + (d & ~7)*4; PEND = acc + (d & ~1)*8; WTEND = acc + d*8
  ...get(WACC), ...get(WD), ...i32c(-8), AND, ...i32c(8), MUL, ADD, ...set(BEND),
  ...get(WV), ...get(WD), ...i32c(-8), AND, ...i32c(4), MUL, ADD, ...set(VREM),
  ...get(WACC), ...get(WD), ...i32c(-2), AND, ...i32c(8), MUL, ADD, ...set(PEND),
  ...get(WACC), ...get(WD), ...i32c(8), MUL, ADD, ...set(WTEND),
  // Each block of 8 elements: acc[i..i+8) in four lanes, summed over p in order, then stored back.
  ...get(WACC), ...set(AB),
  ...get(WV), ...set(VB),
  ...whileLt(AB, BEND, [
    ...LANES.flatMap((l, j) => [...get(AB), ...v128LoadAt(16 * j), ...set(l)]),
    ...get(WE), ...set(EC),
    ...get(VB), ...set(VC),
    ...i32c(0), ...set(WP),
    ...whileLt(WP, WN, [
      ...get(EC), ...f64Load(0), ...SPLAT, ...set(EV),
      ...LANES.flatMap((l, j) => [...get(l), ...get(EV), ...get(VC), ...load64Zero(8 * j), ...PROMOTE_LOW, ...VMUL, ...VADD, ...set(l)]),
      ...get(VC), ...get(WVS), ADD, ...set(VC),
      ...bump(EC, 8),
      ...bump(WP, 1),
    ]),
    ...LANES.flatMap((l, j) => [...get(AB), ...get(l), ...v128StoreAt(16 * j)]),
    ...bump(AB, 64), ...bump(VB, 32),
  ]),
  // The elements past the last block (d % 8), position by position.
  ...i32c(0), ...set(WP),
  ...whileLt(WP, WN, [
    ...get(WE), ...get(WP), ...i32c(8), MUL, ADD, ...f64Load(0), ...tee(EF), ...SPLAT, ...set(EV),
    ...get(VREM), ...get(WP), ...get(WVS), MUL, ADD, ...set(VC),
    ...get(BEND), ...set(AC),
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

export const wsumCode = [...vec([[...u32(5), I32], [...u32(1), V128], [...u32(1), F64], [...u32(5), I32], [...u32(4), V128]]), ...wsumBody];
