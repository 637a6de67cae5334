// The bytes of the SIMD kernel module, assembled by hand (no toolchain) over an imported shared memory:
// linear_rows here, attn_scores and attn_wsum from attention-code.ts. linear_rows reproduces linalg.ts
// `dot` exactly with f64x2 lanes: lanes (s0, s1) and (s2, s3)
// accumulate promote(w) * promote(x) (f32 -> f64 is exact; wasm never fuses mul+add, so each step rounds
// like the JS `s0 += w0 * x0`), then s0 + s1 + (s2 + s3), the scalar tail on s0, and one f32 rounding on
// store (f32.demote_f64 rounds to nearest even, as a Float32Array store does).
//
// export linear_rows(y, w, x, rows, outDim, inDim, o0, o1): byte addresses y, w, x; for o in [o0, o1),
// r in [0, rows): y[r*outDim + o] = dot(w[o*inDim..), x[r*inDim..), inDim) — linalg.ts `linearRows`.
// export linear_rows2(same): the same, weight rows two at a time (dot2: each row's sums in dot's order, so
// bit-identical; the input's loads shared, four independent sums in flight instead of two), the odd one last.

import { scoresCode, wsumCode } from './attention-code.ts';
import { u32, section, vec, I32, F64, V128, get, set, tee, i32c, ADD, MUL, LT_U, BLOCK, LOOP, END, br, brIf, EQZ, f32Load, f32Store, f32StoreAt, PROMOTE, DEMOTE, FADD, FMUL, simd, load64Zero, PROMOTE_LOW, VADD, VMUL, lane, F64_ZERO2, sleb } from './asm.ts';

// Parameters 0..7: y w x rows outDim inDim o0 o1. Locals after them.
const [Y, W, X, ROWS, OUTD, IND, O, O1] = [0, 1, 2, 3, 4, 5, 6, 7];
const R = 8; // i32: input row
const A = 9; // i32: weight cursor
const B = 10; // i32: input cursor
const AEND = 11; // i32: end of the 4-wide part of the weight row
const AROW = 12; // i32: start of the weight row
const TEND = 13; // i32: end of the weight row
const ACC01 = 14; // v128: (s0, s1)
const ACC23 = 15; // v128: (s2, s3)
const S0 = 16; // f64 scalars after the lanes
const S1 = 17;
const S2 = 18;
const S3 = 19;
// Two weight rows at once (o and o+1 over the same input row): the second row's cursors, lanes and scalars,
// and the input pairs promoted once for both.
const A2 = 20; // i32: second weight row's cursor
const AROW2 = 21; // i32: start of the second weight row
const BCC01 = 22; // v128: second row's (s0, s1)
const BCC23 = 23; // v128: second row's (s2, s3)
const XP0 = 24; // v128: promoted input pair at B
const XP1 = 25; // v128: promoted input pair at B+8
const T0 = 26; // f64: second row's scalars
const T1 = 27;
const T2 = 28;
const T3 = 29;

/** acc += promote(w pair at A+off) * promote(x pair at B+off). */
const pair = (acc: number, off: number): number[] => [
  ...get(acc),
  ...get(A), ...load64Zero(off), ...PROMOTE_LOW,
  ...get(B), ...load64Zero(off), ...PROMOTE_LOW,
  ...VMUL, ...VADD, ...set(acc),
];

/** One dot product of the weight row at AROW with the input row at B; stores to y[r*outDim + o]. */
const dot: number[] = [
  ...F64_ZERO2, ...set(ACC01),
  ...F64_ZERO2, ...set(ACC23),
  ...get(AROW), ...set(A),
  // 4-wide part: while A < AEND.
  ...BLOCK,
  ...get(A), ...get(AEND), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...pair(ACC01, 0),
  ...pair(ACC23, 8),
  ...get(A), ...i32c(16), ADD, ...set(A),
  ...get(B), ...i32c(16), ADD, ...set(B),
  ...get(A), ...get(AEND), LT_U, ...brIf(0),
  END,
  END,
  ...get(ACC01), ...lane(0), ...set(S0),
  ...get(ACC01), ...lane(1), ...set(S1),
  ...get(ACC23), ...lane(0), ...set(S2),
  ...get(ACC23), ...lane(1), ...set(S3),
  // Scalar tail on s0: while A < TEND.
  ...BLOCK,
  ...get(A), ...get(TEND), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...get(S0),
  ...get(A), ...f32Load(0), PROMOTE,
  ...get(B), ...f32Load(0), PROMOTE,
  FMUL, FADD, ...set(S0),
  ...get(A), ...i32c(4), ADD, ...set(A),
  ...get(B), ...i32c(4), ADD, ...set(B),
  ...get(A), ...get(TEND), LT_U, ...brIf(0),
  END,
  END,
  // y[(r*outDim + o)] = (s0 + s1) + (s2 + s3)
  ...get(Y), ...get(R), ...get(OUTD), MUL, ...get(O), ADD, ...i32c(4), MUL, ADD,
  ...get(S0), ...get(S1), FADD, ...get(S2), ...get(S3), FADD, FADD, DEMOTE,
  ...f32Store,
];

/** acc += promote(w pair at cursor+off) * xp (an input pair already promoted). */
const pairWith = (acc: number, cursor: number, off: number, xp: number): number[] => [
  ...get(acc),
  ...get(cursor), ...load64Zero(off), ...PROMOTE_LOW,
  ...get(xp),
  ...VMUL, ...VADD, ...set(acc),
];

/**
 * The dot products of the weight rows at AROW and AROW2 with the input row at B, each in `dot`'s exact order
 * (its own lanes, tail and final sum: bit-identical to two `dot`s); stores y[r*outDim + o] and y[.. + o + 1].
 * Sharing the input's loads and running four independent sums instead of two is what makes it faster.
 */
const dot2: number[] = [
  ...F64_ZERO2, ...set(ACC01),
  ...F64_ZERO2, ...set(ACC23),
  ...F64_ZERO2, ...set(BCC01),
  ...F64_ZERO2, ...set(BCC23),
  ...get(AROW), ...set(A),
  ...get(AROW2), ...set(A2),
  ...BLOCK,
  ...get(A), ...get(AEND), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...get(B), ...load64Zero(0), ...PROMOTE_LOW, ...set(XP0),
  ...get(B), ...load64Zero(8), ...PROMOTE_LOW, ...set(XP1),
  ...pairWith(ACC01, A, 0, XP0),
  ...pairWith(BCC01, A2, 0, XP0),
  ...pairWith(ACC23, A, 8, XP1),
  ...pairWith(BCC23, A2, 8, XP1),
  ...get(A), ...i32c(16), ADD, ...set(A),
  ...get(A2), ...i32c(16), ADD, ...set(A2),
  ...get(B), ...i32c(16), ADD, ...set(B),
  ...get(A), ...get(AEND), LT_U, ...brIf(0),
  END,
  END,
  ...get(ACC01), ...lane(0), ...set(S0),
  ...get(ACC01), ...lane(1), ...set(S1),
  ...get(ACC23), ...lane(0), ...set(S2),
  ...get(ACC23), ...lane(1), ...set(S3),
  ...get(BCC01), ...lane(0), ...set(T0),
  ...get(BCC01), ...lane(1), ...set(T1),
  ...get(BCC23), ...lane(0), ...set(T2),
  ...get(BCC23), ...lane(1), ...set(T3),
  // Scalar tails on s0 of each row: while A < TEND (A2 moves in step).
  ...BLOCK,
  ...get(A), ...get(TEND), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...get(S0),
  ...get(A), ...f32Load(0), PROMOTE,
  ...get(B), ...f32Load(0), PROMOTE,
  FMUL, FADD, ...set(S0),
  ...get(T0),
  ...get(A2), ...f32Load(0), PROMOTE,
  ...get(B), ...f32Load(0), PROMOTE,
  FMUL, FADD, ...set(T0),
  ...get(A), ...i32c(4), ADD, ...set(A),
  ...get(A2), ...i32c(4), ADD, ...set(A2),
  ...get(B), ...i32c(4), ADD, ...set(B),
  ...get(A), ...get(TEND), LT_U, ...brIf(0),
  END,
  END,
  ...get(Y), ...get(R), ...get(OUTD), MUL, ...get(O), ADD, ...i32c(4), MUL, ADD,
  ...get(S0), ...get(S1), FADD, ...get(S2), ...get(S3), FADD, FADD, DEMOTE,
  ...f32Store,
  ...get(Y), ...get(R), ...get(OUTD), MUL, ...get(O), ADD, ...i32c(4), MUL, ADD,
  ...get(T0), ...get(T1), FADD, ...get(T2), ...get(T3), FADD, FADD, DEMOTE,
  ...f32StoreAt(4),
];

/** Sets AROW, TEND and AEND for weight row O. */
const rowBounds: number[] = [
  // AROW = w + o*inDim*4; TEND = AROW + inDim*4; AEND = AROW + (inDim & ~3)*4
  ...get(W), ...get(O), ...get(IND), MUL, ...i32c(4), MUL, ADD, ...tee(AROW),
  ...get(IND), ...i32c(4), MUL, ADD, ...set(TEND),
  ...get(AROW), ...get(IND), ...i32c(-4), 0x71 /* i32.and */, ...i32c(4), MUL, ADD, ...set(AEND),
];

/** for (r = 0; r < rows; r++) { B = x + r*inDim*4; inner } */
const overRows = (inner: number[]): number[] => [
  ...i32c(0), ...set(R),
  ...BLOCK,
  ...get(R), ...get(ROWS), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...get(X), ...get(R), ...get(IND), MUL, ...i32c(4), MUL, ADD, ...set(B),
  ...inner,
  ...get(R), ...i32c(1), ADD, ...tee(R), ...get(ROWS), LT_U, ...brIf(0),
  END,
  END,
];

/** One weight row at a time from o (linear_rows; the tail of linear_rows2). */
const singles: number[] = [
  ...BLOCK,
  ...get(O), ...get(O1), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...rowBounds,
  ...overRows(dot),
  ...get(O), ...i32c(1), ADD, ...tee(O), ...get(O1), LT_U, ...brIf(0),
  END,
  END,
];

/** linear_rows: one weight row at a time. */
const body: number[] = [...singles, END];

/**
 * linear_rows2: weight rows in pairs, then the odd one. For batches (rows > 1): at one input row (decode) tiny-moe
 * ran slower with it, though a hot-cache loop of it is faster; a function of its own keeps linear_rows' code as it was.
 */
const body2: number[] = [
  // Pairs of weight rows: while o + 1 < o1.
  ...BLOCK,
  ...get(O), ...i32c(1), ADD, ...get(O1), LT_U, EQZ, ...brIf(0),
  ...LOOP,
  ...rowBounds,
  ...get(AROW), ...get(IND), ...i32c(4), MUL, ADD, ...set(AROW2),
  ...overRows(dot2),
  ...get(O), ...i32c(2), ADD, ...tee(O), ...i32c(1), ADD, ...get(O1), LT_U, ...brIf(0),
  END,
  END,
  // Then the odd one left.
  ...singles,
  END, // function end
];

/** Most 64 KiB pages of the imported memory (4 GiB, all a 32-bit address reaches). */
export const MAX_PAGES = 65536;

/** The module's bytes (imports a shared memory of at most MAX_PAGES pages). */
export function linearModuleBytes(): Uint8Array {
  const maxPages = MAX_PAGES;
  const linearType = [0x60, ...vec(Array.from({ length: 8 }, () => [I32])), 0];
  const attnType = [0x60, ...vec(Array.from({ length: 6 }, () => [I32])), 0];
  const code = [...vec([[...u32(6), I32], [...u32(2), V128], [...u32(4), F64]]), ...body];
  const code2 = [...vec([[...u32(6), I32], [...u32(2), V128], [...u32(4), F64], [...u32(2), I32], [...u32(4), V128], [...u32(4), F64]]), ...body2];
  const name = (s: string): number[] => [...u32(s.length), ...[...s].map((c) => c.charCodeAt(0))];
  const fn = (c: number[]): number[] => [...u32(c.length), ...c];
  const bytes = [
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec([linearType, attnType])),
    // import env.memory: shared memory, min 1 page (any larger memory satisfies it), max maxPages.
    ...section(2, vec([[...name('env'), ...name('memory'), 0x02, 0x03, ...u32(1), ...u32(maxPages)]])),
    ...section(3, vec([u32(0), u32(1), u32(1), u32(0)])),
    ...section(7, vec([
      [...name('linear_rows'), 0x00, ...u32(0)],
      [...name('attn_scores'), 0x00, ...u32(1)],
      [...name('attn_wsum'), 0x00, ...u32(2)],
      [...name('linear_rows2'), 0x00, ...u32(3)],
    ])),
    ...section(10, vec([fn(code), fn(scoresCode), fn(wsumCode), fn(code2)])),
  ];
  return Uint8Array.from(bytes);
}
