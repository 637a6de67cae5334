// The code of linear_tab (assembled into module.ts): linalg.ts `linearRows` over input rows of float64 (the
// float32 inputs promoted once, exactly) reached through tables of row addresses, so one function serves the
// linear layers (rows contiguous) and the grouped experts (each expert's picks gathered by address, outputs
// scattered to the picks' rows):
//   linear_tab(yTab, w, xTab, rows, inDim, o0, o1): for r < rows, o in [o0, o1):
//     f32 at (yTab[r] + 4*o) = dot(w[o*inDim..), x_r, inDim) with x_r the float64 row at xTab[r].
// Every sum is linalg.ts `dot`'s: lanes (s0, s1) and (s2, s3) of float64 products (exact: float32 * float32 fits
// a float64), the scalar tail on s0, s0 + s1 + (s2 + s3), one float32 rounding on store. Speed: up to three input
// rows per pass over a weight row (each promoted weight pair serves three inputs, six independent sums in
// flight), input rows outside and weight rows inside, so the tile's inputs stay in L1 while the weight rows stream
// (callers keep [o0, o1) to a block that fits L2: kernel.ts).
import { ADD, AND, GT_U, LE_U, BLOCK, EQZ, END, F64_ZERO2, FADD, FMUL, LOOP, LT_U, MUL, PROMOTE, PROMOTE_LOW, VADD, VMUL, DEMOTE, brIf, f32Load, f32Store, f64Load, get, i32c, i32LoadAt, lane, load64Zero, set, tee, v128LoadAt, u32, I32, F64, V128, vec } from './asm.ts';

// Parameters.
const [YT, W, XT, ROWS, IND, O0, O1] = [0, 1, 2, 3, 4, 5, 6];
// i32 locals.
const [R, O, A, AROW, AEND, TEND] = [7, 8, 9, 10, 11, 12];
const B = [13, 14, 15, 16]; // input cursors of the tile's rows
const YA = 17;
// v128 locals: per input row k, (s0, s1) at ACC[2k] and (s2, s3) at ACC[2k+1]; the promoted weight pairs.
const ACC = [18, 19, 20, 21, 22, 23, 24, 25];
const [WP0, WP1] = [26, 27];
// f64 locals: per input row its s0 after the lanes; the promoted weight of the tail.
const S = [28, 29, 30, 31];
const WS = 32;

const whileLt = (cur: number, end: number, body: number[]): number[] => [
  ...BLOCK, ...get(cur), ...get(end), LT_U, EQZ, ...brIf(0),
  ...LOOP, ...body, ...get(cur), ...get(end), LT_U, ...brIf(0), END,
  END,
];
const bump = (l: number, n: number): number[] => [...get(l), ...i32c(n), ADD, ...set(l)];
const ks = (n: number): number[] => Array.from({ length: n }, (_, k) => k);

/** Rows R..R+n-1 against weight row O: n dot products sharing each weight load. */
function tile(n: number): number[] {
  return [
    // AROW = w + o*inDim*4; TEND = AROW + inDim*4; AEND = AROW + (inDim & ~3)*4
    ...get(W), ...get(O), ...get(IND), MUL, ...i32c(4), MUL, ADD, ...tee(AROW), ...set(A),
    ...get(AROW), ...get(IND), ...i32c(4), MUL, ADD, ...set(TEND),
    ...get(AROW), ...get(IND), ...i32c(-4), AND, ...i32c(4), MUL, ADD, ...set(AEND),
    ...ks(n).flatMap((k) => [...get(XT), ...get(R), ...i32c(4), MUL, ADD, ...i32LoadAt(4 * k), ...set(B[k]!)]),
    ...ks(2 * n).flatMap((k) => [...F64_ZERO2, ...set(ACC[k]!)]),
    ...whileLt(A, AEND, [
      ...get(A), ...load64Zero(0), ...PROMOTE_LOW, ...set(WP0),
      ...get(A), ...load64Zero(8), ...PROMOTE_LOW, ...set(WP1),
      ...ks(n).flatMap((k) => [
        ...get(ACC[2 * k]!), ...get(WP0), ...get(B[k]!), ...v128LoadAt(0), ...VMUL, ...VADD, ...set(ACC[2 * k]!),
        ...get(ACC[2 * k + 1]!), ...get(WP1), ...get(B[k]!), ...v128LoadAt(16), ...VMUL, ...VADD, ...set(ACC[2 * k + 1]!),
      ]),
      ...bump(A, 16),
      ...ks(n).flatMap((k) => bump(B[k]!, 32)),
    ]),
    ...ks(n).flatMap((k) => [...get(ACC[2 * k]!), ...lane(0), ...set(S[k]!)]),
    // Scalar tail on each s0.
    ...whileLt(A, TEND, [
      ...get(A), ...f32Load(0), PROMOTE, ...set(WS),
      ...ks(n).flatMap((k) => [...get(S[k]!), ...get(WS), ...get(B[k]!), ...f64Load(0), FMUL, FADD, ...set(S[k]!), ...bump(B[k]!, 8)]),
      ...bump(A, 4),
    ]),
    ...ks(n).flatMap((k) => [
      ...get(YT), ...get(R), ...i32c(4), MUL, ADD, ...i32LoadAt(4 * k), ...get(O), ...i32c(4), MUL, ADD, ...set(YA),
      ...get(YA),
      ...get(S[k]!), ...get(ACC[2 * k]!), ...lane(1), FADD,
      ...get(ACC[2 * k + 1]!), ...lane(0), ...get(ACC[2 * k + 1]!), ...lane(1), FADD,
      FADD, DEMOTE, ...f32Store,
    ]),
  ];
}

/** for (o = o0; o < o1; o++) inner */
const overO = (inner: number[]): number[] => [...get(O0), ...set(O), ...whileLt(O, O1, [...inner, ...bump(O, 1)])];

/** `then` when R + n <= rows, once. */
const ifRows = (n: number, then: number[]): number[] => [
  ...BLOCK, ...get(R), ...i32c(n), ADD, ...get(ROWS), GT_U, ...brIf(0), ...then, END,
];

/**
 * Input rows per pass over a weight row. Four spilled an accumulator in V8's x64 code (a store-forwarding chain
 * each pass: slower than two); two and three ran alike (~1.3x linear_rows2 in a loop of each at tiny-moe's shapes).
 */
const TILE = 3;

const body: number[] = [
  ...i32c(0), ...set(R),
  // Tiles of TILE input rows while R + TILE <= rows.
  ...BLOCK,
  ...get(R), ...i32c(TILE), ADD, ...get(ROWS), GT_U, ...brIf(0),
  ...LOOP,
  ...overO(tile(TILE)),
  ...bump(R, TILE),
  ...get(R), ...i32c(TILE), ADD, ...get(ROWS), LE_U, ...brIf(0),
  END,
  END,
  // The one or two rows left.
  ...ifRows(2, [...overO(tile(2)), ...bump(R, 2)]),
  ...ifRows(1, overO(tile(1))),
  END,
];

/** The function's type: seven i32 parameters, no result. */
export const tabType = [0x60, ...vec(Array.from({ length: 7 }, () => [I32])), 0];

export const tabCode = [...vec([[...u32(11), I32], [...u32(10), V128], [...u32(5), F64]]), ...body];
