// The code of exp (assembled into module.ts): V8's Math.exp step for step, so SwiGLU's silu can run in wasm and
// stay bit-identical to the JS spec. V8 computes Math.exp with base/ieee754.cc `exp`, fdlibm's __ieee754_exp
// (FreeBSD e_exp.c) plus a special case exp(1) = E; the steps below are that C function's, in its order (wasm
// float64 arithmetic is IEEE round-to-nearest and never fused, as the C is compiled for x86-64).
//   exp(x: f64) -> f64
// Checked against Math.exp: simd.test.ts (every float32 exponent and special values, random float64), and
// bench/cpu/silu-exhaustive.ts (silu of all 2^32 float32 inputs, the values SwiGLU feeds it).
import { ADD, END, EQZ, GT_U, LT_U, get, i32c, set, u32, I32, F64, vec } from './asm.ts';

const [X] = [0];
const [HX, LX, XSB, K] = [1, 2, 3, 4]; // i32
const [HI, LO, T, C, Y] = [5, 6, 7, 8, 9]; // f64
const BITS = 10; // i64
const I64 = 0x7e;

/** f64.const v (little-endian bytes). */
export function f64c(v: number): number[] {
  return [0x44, ...new Uint8Array(Float64Array.of(v).buffer)];
}
const IF = [0x04, 0x40];
const IF_F64 = [0x04, F64];
const ELSE = 0x05;
const RETURN = 0x0f;
const SELECT = 0x1b;
const [AND, OR, SHL, SHR_U, SUB, GE_U, GE_S, EQ] = [0x71, 0x72, 0x74, 0x76, 0x6b, 0x4f, 0x4e, 0x46];
const [FADD, FSUB, FMUL, FDIV, FEQ, FLT, FGT] = [0xa0, 0xa1, 0xa2, 0xa3, 0x61, 0x63, 0x64];
const [I64_SHL, I64_SHR_U, WRAP, EXTEND_U, TRUNC_S, CONVERT_S, I64_REINTERPRET, F64_REINTERPRET] = [0x86, 0x88, 0xa7, 0xad, 0xaa, 0xb7, 0xbd, 0xbf];
const i64c = (n: number): number[] => [0x42, ...u32(n)]; // small non-negative constants only

const ln2HI = 6.93147180369123816490e-1;
const ln2LO = 1.90821492927058770002e-10;
const [P1, P2, P3, P4, P5] = [1.66666666666666019037e-1, -2.77777777770155933842e-3, 6.61375632143793436117e-5, -1.65339022054652515390e-6, 4.13813679705723846039e-8];

/** 2^e as INSERT_WORDS(0x3ff00000 + (e << 20), 0) with the exponent e computed by `e`. */
const twoTo = (e: number[]): number[] => [...i32c(0x3ff00000), ...e, ...i32c(20), SHL, ADD, EXTEND_U, ...i64c(32), I64_SHL, F64_REINTERPRET];
/** v_true if xsb else v_false. */
const bySign = (ifNeg: number, ifPos: number): number[] => [...f64c(ifNeg), ...f64c(ifPos), ...get(XSB), SELECT];

const body: number[] = [
  ...get(X), I64_REINTERPRET, ...set(BITS),
  ...get(BITS), ...i64c(32), I64_SHR_U, WRAP, ...set(HX),
  ...get(BITS), WRAP, ...set(LX),
  ...get(HX), ...i32c(31), SHR_U, ...set(XSB),
  ...get(HX), ...i32c(0x7fffffff), AND, ...set(HX),
  // Non-finite, overflow and underflow arguments (|x| >= 709.78...).
  ...get(HX), ...i32c(0x40862e42), GE_U, ...IF,
  ...get(HX), ...i32c(0x7ff00000), GE_U, ...IF,
  ...get(HX), ...i32c(0xfffff), AND, ...get(LX), OR, ...IF, ...get(X), ...get(X), FADD, RETURN, END,
  ...get(XSB), ...IF, ...f64c(0), RETURN, END,
  ...get(X), RETURN,
  END,
  ...get(X), ...f64c(7.09782712893383973096e2), FGT, ...IF, ...f64c(Infinity), RETURN, END,
  ...get(X), ...f64c(-7.45133219101941108420e2), FLT, ...IF, ...f64c(0), RETURN, END,
  END,
  // Argument reduction: x = hi - lo, x = k ln2 + (hi - lo).
  ...get(HX), ...i32c(0x3fd62e42), GT_U, ...IF,
  ...get(HX), ...i32c(0x3ff0a2b2), LT_U, ...IF,
  ...get(X), ...f64c(1), FEQ, ...IF, ...f64c(2.718281828459045), RETURN, END,
  ...get(X), ...bySign(-ln2HI, ln2HI), FSUB, ...set(HI),
  ...bySign(-ln2LO, ln2LO), ...set(LO),
  ...i32c(1), ...get(XSB), ...get(XSB), ADD, SUB, ...set(K),
  ELSE,
  ...f64c(1.44269504088896338700), ...get(X), FMUL, ...bySign(-0.5, 0.5), FADD, TRUNC_S, ...set(K),
  ...get(K), CONVERT_S, ...set(T),
  ...get(X), ...get(T), ...f64c(ln2HI), FMUL, FSUB, ...set(HI),
  ...get(T), ...f64c(ln2LO), FMUL, ...set(LO),
  END,
  ...get(HI), ...get(LO), FSUB, ...set(X),
  ELSE,
  // |x| < 2^-28: 1 + x (fdlibm's `huge + x > one` test is always true here).
  ...get(HX), ...i32c(0x3e300000), LT_U, ...IF, ...f64c(1), ...get(X), FADD, RETURN, END,
  END,
  // The primary range: c = x - t (P1 + t (P2 + t (P3 + t (P4 + t P5)))), t = x^2.
  ...get(X), ...get(X), FMUL, ...set(T),
  ...get(X), ...get(T),
  ...f64c(P1), ...get(T), ...f64c(P2), ...get(T), ...f64c(P3), ...get(T), ...f64c(P4), ...get(T), ...f64c(P5),
  FMUL, FADD, FMUL, FADD, FMUL, FADD, FMUL, FADD, FMUL, FSUB, ...set(C),
  ...get(K), EQZ, ...IF,
  ...f64c(1), ...get(X), ...get(C), FMUL, ...get(C), ...f64c(2), FSUB, FDIV, ...get(X), FSUB, FSUB, RETURN,
  END,
  ...f64c(1), ...get(LO), ...get(X), ...get(C), FMUL, ...f64c(2), ...get(C), FSUB, FDIV, FSUB, ...get(HI), FSUB, FSUB, ...set(Y),
  ...get(K), ...i32c(-1021), GE_S, ...IF_F64,
  ...get(K), ...i32c(1024), EQ, ...IF, ...get(Y), ...f64c(2), FMUL, ...f64c(8.988465674311579539e307), FMUL, RETURN, END,
  ...get(Y), ...twoTo(get(K)), FMUL,
  ELSE,
  ...get(Y), ...twoTo([...get(K), ...i32c(1000), ADD]), FMUL, ...f64c(9.33263618503218878990e-302), FMUL,
  END,
  END,
];

/** The function's type: (f64) -> f64. */
export const expType = [0x60, ...vec([[F64]]), ...vec([[F64]])];

export const expCode = [...vec([[...u32(4), I32], [...u32(5), F64], [...u32(1), I64]]), ...body];
