// The code of linear_tab (assembled into module.ts): linalg.ts `linearRows` over input rows of float64 (the
// float32 inputs promoted once, exactly) reached through tables of row addresses, so one function serves the
// linear layers (rows contiguous) and the grouped experts (each expert's picks gathered by address, outputs
// scattered to the picks' rows):
//   linear_tab(yTab, w, xTab, rows, inDim, o0, o1): for r < rows, o in [o0, o1):
//     f32 at (yTab[r] + 4*o) = dot(w[o*inDim..), x_r, inDim) with x_r the float64 row at xTab[r].
// Every sum is linalg.ts `dot`'s: lanes (s0, s1) and (s2, s3) of float64 products (exact: float32 * float32 fits
// a float64), the scalar tail on s0, s0 + s1 + (s2 + s3), one float32 rounding on store. Speed: tiles of n input
// rows by m weight rows, 2 x 2 while two or more rows are left and 1 x 4 for the last one (linear_tab1 when it is
// the only one), each promoted weight pair serving the tile's n inputs and each input pair its m weight rows: eight
// independent sums in flight, as many as two fused multiply-adds a cycle of four cycles' latency keep busy (3 x 1
// kept six, with 1.33 loads a multiply-add against 2 x 2's one, and ran slower; one row against one weight row at a
// time left the sums waiting on their own adds). A tile's m weight
// rows are a half (a quarter) of the block apart, each cursor running on through its part of the block row after
// row, so the weights stream as m long sequential reads the prefetcher follows (m adjacent rows made m streams
// of one row each: loads missed, and the whole step ran slower). Input rows outside and weight rows inside, so
// the tile's inputs stay in L1 while the weight rows stream (callers keep [o0, o1) to a block that fits L2:
// kernel.ts).
import {
  ADD, AND, DIV_U, SHR_U, SUB, GT_U, LE_U, BLOCK, END, F64_ZERO2, FADD, FMUL, LOOP, MUL, PROMOTE, PROMOTE_LOW,
  DEMOTE, exactMulAdd, brIf, f32Load, f32StoreAt, f64Load, get, i32c, i32LoadAt, lane, load64Zero, set, v128LoadAt,
  u32, I32, F64, V128, vec, whileLt, bump, LOAD16X4_U, I32X4_SHL, SHUFFLE_HIGH_PAIR, I32_LOAD16_U, I32_SHL, F32_REINTERPRET_I32,
} from './asm.ts';

/** Most input rows and weight rows of a tile (n * m <= 4: eight v128 sums). */
const MAX_N = 2;
const MAX_M = 4;
const MAX_SUMS = 8;

// Parameters.
const [YT, W, XT, ROWS, IND, O0, O1] = [0, 1, 2, 3, 4, 5, 6];
// i32 locals.
const [R, O, AEND, TEND, ROWB, YA, OEND, QB] = [7, 8, 9, 10, 11, 12, 13, 14];
const B = [15, 16]; // input cursors of the tile's rows
const AEND8 = 17; // where the passes of eight values end
const A = [18, 19, 20, 21]; // weight cursors of the tile's weight rows (each runs on to its next row)
const I32_LOCALS = 15;
// v128 locals: sums (s0, s1) at ACC[2s] and (s2, s3) at ACC[2s+1] of sum s = k*m + j; promoted weight pairs WP[2j],
// WP[2j+1]; the input pair XP0, XP1 of the row in hand.
const ACC = Array.from({ length: 2 * MAX_SUMS }, (_, i) => 22 + i);
const WP = Array.from({ length: 2 * MAX_M }, (_, i) => 38 + i);
const [XP0, XP1] = [46, 47];
const V128_LOCALS = 26;
// f64 locals: each sum's s0 after the lanes; the promoted weights of the tail.
const S = Array.from({ length: MAX_SUMS }, (_, i) => 48 + i);
const WS = Array.from({ length: MAX_M }, (_, i) => 56 + i);
const F64_LOCALS = 12;

const ks = (n: number): number[] => Array.from({ length: n }, (_, k) => k);

/**
 * bf16 weights: four values at cursor `a` widened to float32 exactly (each bit pattern zero-extended to 32 bits and
 * shifted up 16: the float32 with those top bits), then promoted pairwise into `lo` (values 0, 1) and `hi` (2, 3),
 * the same pairs linear_tab's float32 loads make.
 */
const bf16Pairs = (a: number, lo: number, hi: number, off: number): number[] => [
  ...get(a), ...LOAD16X4_U(off), ...i32c(16), ...I32X4_SHL, ...set(hi),
  ...get(hi), ...PROMOTE_LOW, ...set(lo),
  ...get(hi), ...get(hi), ...SHUFFLE_HIGH_PAIR, ...PROMOTE_LOW, ...set(hi),
];

/** One bf16 value at the cursor on the stack as its float32 (the scalar tail's load). */
const bf16Load = [...I32_LOAD16_U(0), ...i32c(16), I32_SHL, F32_REINTERPRET_I32];

/**
 * Input rows R..R+n-1 against the weight rows at cursors A[0..m) (rows O, O + Q, .. with QB = 4Q): nm dot products
 * sharing each load. The cursors end at their next rows.
 */
function tile(n: number, m: number, fma: boolean, bf16: boolean): number[] {
  if (n > MAX_N || m > MAX_M || n * m > MAX_SUMS / 2 + (n === 1 ? MAX_SUMS / 2 : 0)) throw new Error(`linear_tab: no ${n} x ${m} tile`);
  const sum = (k: number, j: number): number => k * m + j;
  /** Weight bytes of a group of four values. */
  const wb = bf16 ? 8 : 16;
  /** Group g of four values past the cursors: each weight pair promoted once, each input pair once, nm products each. */
  const group = (g: number): number[] => [
    ...ks(m).flatMap((j) => (bf16 ? bf16Pairs(A[j]!, WP[2 * j]!, WP[2 * j + 1]!, g * wb) : [
      ...get(A[j]!), ...load64Zero(g * wb), ...PROMOTE_LOW, ...set(WP[2 * j]!),
      ...get(A[j]!), ...load64Zero(g * wb + 8), ...PROMOTE_LOW, ...set(WP[2 * j + 1]!),
    ])),
    ...ks(n).flatMap((k) => [
      ...get(B[k]!), ...v128LoadAt(g * 32), ...set(XP0),
      ...get(B[k]!), ...v128LoadAt(g * 32 + 16), ...set(XP1),
      ...ks(m).flatMap((j) => [
        ...exactMulAdd(ACC[2 * sum(k, j)]!, get(WP[2 * j]!), get(XP0), fma),
        ...exactMulAdd(ACC[2 * sum(k, j) + 1]!, get(WP[2 * j + 1]!), get(XP1), fma),
      ]),
    ]),
  ];
  const bumps = (groups: number): number[] => [
    ...ks(m).flatMap((j) => bump(A[j]!, groups * wb)),
    ...ks(n).flatMap((k) => bump(B[k]!, groups * 32)),
  ];
  return [
    // TEND = A[0] + ROWB; AEND = A[0] + (inDim & ~3)*4
    ...get(A[0]!), ...get(ROWB), ADD, ...set(TEND),
    ...get(A[0]!), ...get(IND), ...i32c(-4), AND, ...i32c(bf16 ? 2 : 4), MUL, ADD, ...set(AEND),
    ...ks(n).flatMap((k) => [...get(XT), ...get(R), ...i32c(4), MUL, ADD, ...i32LoadAt(4 * k), ...set(B[k]!)]),
    ...ks(2 * n * m).flatMap((s) => [...F64_ZERO2, ...set(ACC[s]!)]),
    // One input row of float32 weights: eight values a pass while eight are left (each cursor bumped once for two
    // groups of four), then one group of four: the same products added to the same sums in the same order as one group
    // a pass, with fewer bumps and branches. It paid only here: the 2 x 2 tile and bf16 widening ran no faster or
    // slower with it, so those keep one group a pass (docs/results.md, "CPU kernels").
    ...(n === 1 && !bf16
      ? [
          ...get(A[0]!), ...get(IND), ...i32c(-8), AND, ...i32c(wb / 4), MUL, ADD, ...set(AEND8),
          ...whileLt(A[0]!, AEND8, [...group(0), ...group(1), ...bumps(2)]),
        ]
      : []),
    ...whileLt(A[0]!, AEND, [...group(0), ...bumps(1)]),
    ...ks(n * m).flatMap((s) => [...get(ACC[2 * s]!), ...lane(0), ...set(S[s]!)]),
    // Scalar tail on each s0.
    ...whileLt(A[0]!, TEND, [
      ...ks(m).flatMap((j) => [...get(A[j]!), ...(bf16 ? bf16Load : f32Load(0)), PROMOTE, ...set(WS[j]!), ...bump(A[j]!, bf16 ? 2 : 4)]),
      ...ks(n).flatMap((k) => [
        ...ks(m).flatMap((j) => [...get(S[sum(k, j)]!), ...get(WS[j]!), ...get(B[k]!), ...f64Load(0), FMUL, FADD, ...set(S[sum(k, j)]!)]),
        ...bump(B[k]!, 8),
      ]),
    ]),
    ...ks(n).flatMap((k) => [
      ...get(YT), ...get(R), ...i32c(4), MUL, ADD, ...i32LoadAt(4 * k), ...get(O), ...i32c(4), MUL, ADD, ...set(YA),
      ...ks(m).flatMap((j) => {
        const s = sum(k, j);
        return [
          ...get(YA), ...(j > 0 ? [...get(QB), ...i32c(j), MUL, ADD] : []),
          ...get(S[s]!), ...get(ACC[2 * s]!), ...lane(1), FADD,
          ...get(ACC[2 * s + 1]!), ...lane(0), ...get(ACC[2 * s + 1]!), ...lane(1), FADD,
          FADD, DEMOTE, ...f32StoreAt(0),
        ];
      }),
    ]),
  ];
}

/**
 * Rows [o0, o1) as tiles of m rows Q = (o1 - o0) / m apart (row O with O + Q, .., O + (m-1)Q for O in [o0, o0 + Q)),
 * then the rows from o0 + mQ on as n x 1 tiles; the cursors start once and run on.
 */
const overO = (n: number, m: number, fma: boolean, bf16: boolean): number[] => [
  ...get(O0), ...set(O),
  ...get(W), ...get(O0), ...get(ROWB), MUL, ADD, ...set(A[0]!),
  ...(m > 1
    ? [
        // Q rows a part: OEND = o0 + Q, QB = 4Q; A[j] = A[0] + j*Q*ROWB.
        ...get(O1), ...get(O0), SUB, ...i32c(m), DIV_U, ...set(QB),
        ...get(O0), ...get(QB), ADD, ...set(OEND),
        ...ks(m).slice(1).flatMap((j) => [...get(A[j - 1]!), ...get(QB), ...get(ROWB), MUL, ADD, ...set(A[j]!)]),
        ...get(QB), ...i32c(4), MUL, ...set(QB),
        ...whileLt(O, OEND, [...tile(n, m, fma, bf16), ...bump(O, 1)]),
        // On to the rows after the m parts: O = o0 + mQ, where A[m-1] has run on to.
        ...get(O0), ...get(QB), ...i32c(2), SHR_U, ...i32c(m), MUL, ADD, ...set(O),
        ...get(A[m - 1]!), ...set(A[0]!),
      ]
    : []),
  ...whileLt(O, O1, [...tile(n, 1, fma, bf16), ...bump(O, 1)]),
];

/** `then` when R + n <= rows, once. */
const ifRows = (n: number, then: number[]): number[] => [
  ...BLOCK, ...get(R), ...i32c(n), ADD, ...get(ROWS), GT_U, ...brIf(0), ...then, END,
];

const body = (fma: boolean, bf16: boolean): number[] => [
  ...get(IND), ...i32c(bf16 ? 2 : 4), MUL, ...set(ROWB),
  ...i32c(0), ...set(R),
  // 2 x 2 tiles while R + 2 <= rows.
  ...BLOCK,
  ...get(R), ...i32c(2), ADD, ...get(ROWS), GT_U, ...brIf(0),
  ...LOOP,
  ...overO(2, 2, fma, bf16),
  ...bump(R, 2),
  ...get(R), ...i32c(2), ADD, ...get(ROWS), LE_U, ...brIf(0),
  END,
  END,
  // The last row when rows is odd, against four weight rows at a time.
  ...ifRows(1, overO(1, 4, fma, bf16)),
  END,
];

/** The function's type: seven i32 parameters, no result. */
export const tabType = [0x60, ...vec(Array.from({ length: 7 }, () => [I32])), 0];

/**
 * The function's code; `fma`: the products' adds fused (relaxed_madd: asm.ts exactMulAdd, the same sums); `bf16`: the
 * weight rows are bf16 bit patterns (2 bytes a value, widened exactly to float32 in registers: linear_tab_bf16).
 */
export const tabCode = (fma: boolean, bf16 = false): number[] => [...vec([[...u32(I32_LOCALS), I32], [...u32(V128_LOCALS), V128], [...u32(F64_LOCALS), F64]]), ...body(fma, bf16)];

/**
 * linear_tab1: the same for one input row (rows must be 1: kernel.ts calls it for decode's one-row steps). Its own
 * function so that its code is compiled alone: inside linear_tab the one-row tiles slowed whenever the other tiles
 * changed (V8 allocates registers over the whole function).
 */
export const tab1Code = (fma: boolean, bf16 = false): number[] => [...vec([[...u32(I32_LOCALS), I32], [...u32(V128_LOCALS), V128], [...u32(F64_LOCALS), F64]]),
  ...get(IND), ...i32c(bf16 ? 2 : 4), MUL, ...set(ROWB), ...i32c(0), ...set(R), ...overO(1, 4, fma, bf16), END];
