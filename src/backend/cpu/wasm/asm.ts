// A tiny WebAssembly assembler: LEB128, sections, and the opcodes the SIMD kernels use.

/** Unsigned LEB128. */
export function u32(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
}

/** A section: id, byte length, contents. */
export function section(id: number, body: number[]): number[] {
  return [id, ...u32(body.length), ...body];
}

/** A vector: count then the items. */
export function vec(items: number[][]): number[] {
  return [...u32(items.length), ...items.flat()];
}

export const I32 = 0x7f;
export const F64 = 0x7c;
export const V128 = 0x7b;

// Core opcodes used below.
export const get = (i: number): number[] => [0x20, ...u32(i)];
export const set = (i: number): number[] => [0x21, ...u32(i)];
export const tee = (i: number): number[] => [0x22, ...u32(i)];
export const i32c = (n: number): number[] => [0x41, ...sleb(n)];
export const ADD = 0x6a;
export const SUB = 0x6b;
export const MUL = 0x6c;
export const DIV_U = 0x6e;
export const SHR_U = 0x76;
export const LT_U = 0x49;
export const GT_U = 0x4b;
export const LE_U = 0x4d;
export const BLOCK = [0x02, 0x40];
export const LOOP = [0x03, 0x40];
export const END = 0x0b;
export const br = (d: number): number[] => [0x0c, ...u32(d)];
export const brIf = (d: number): number[] => [0x0d, ...u32(d)];
export const EQZ = 0x45;
export const f32Load = (off: number): number[] => [0x2a, 2, ...u32(off)];
export const f32Store = [0x38, 2, 0];
export const i32LoadAt = (off: number): number[] => [0x28, 2, ...u32(off)];
export const f32StoreAt = (off: number): number[] => [0x38, 2, ...u32(off)];
export const PROMOTE = 0xbb; // f64.promote_f32
export const DEMOTE = 0xb6; // f32.demote_f64
export const FADD = 0xa0;
export const FMUL = 0xa2;
// SIMD (prefix 0xfd, LEB opcode).
export const simd = (op: number, ...imm: number[]): number[] => [0xfd, ...u32(op), ...imm];
export const load64Zero = (off: number): number[] => simd(0x5d, 3, ...u32(off)); // v128.load64_zero
export const PROMOTE_LOW = simd(0x5f); // f64x2.promote_low_f32x4
export const VADD = simd(0xf0); // f64x2.add
export const VMUL = simd(0xf2); // f64x2.mul
export const VMADD = simd(0x107); // f64x2.relaxed_madd (relaxed SIMD): a * b + c, fused or not

/**
 * acc += a * b over f64x2 lanes whose products are exact (float32 values times float32 values: 48 significant bits
 * fit a float64's 53, and no product over- or underflows), so rounding the product first or not gives the same sum:
 * with `fma` one relaxed_madd, else a multiply and an add (acc + a*b, the JS loops' order).
 */
export function exactMulAdd(acc: number, a: number[], b: number[], fma: boolean): number[] {
  return fma ? [...a, ...b, ...get(acc), ...VMADD, ...set(acc)] : [...get(acc), ...a, ...b, ...VMUL, ...VADD, ...set(acc)];
}
export const lane = (l: number): number[] => simd(0x21, l); // f64x2.extract_lane
export const LOAD16X4_U = (off: number): number[] => simd(0x04, 3, ...u32(off)); // v128.load16x4_u: four u16 zero-extended to i32x4
export const I32X4_SHL = simd(0xab); // i32x4.shl (by an i32 operand)
/** i8x16.shuffle of (v, v) moving 32-bit lanes 2, 3 to 0, 1 (f64x2.promote_low then widens them). */
export const SHUFFLE_HIGH_PAIR = simd(0x0d, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
export const I32_LOAD16_U = (off: number): number[] => [0x2f, 1, ...u32(off)];
export const I32_SHL = 0x74;
export const F32_REINTERPRET_I32 = 0xbe;
export const F64_ZERO2 = [0x44, 0, 0, 0, 0, 0, 0, 0, 0, ...simd(0x14)]; // f64.const 0; f64x2.splat

export function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
}

export const f64Load = (off: number): number[] => [0x2b, 3, ...u32(off)];
export const f64Store = [0x39, 3, 0];
export const f64StoreAt = (off: number): number[] => [0x39, 3, ...u32(off)];
export const v128Load = [0xfd, 0x00, 3, 0];
export const v128Store = [0xfd, 0x0b, 3, 0];
export const v128LoadAt = (off: number): number[] => [0xfd, 0x00, 3, ...u32(off)];
export const v128StoreAt = (off: number): number[] => [0xfd, 0x0b, 3, ...u32(off)];
export const SPLAT = simd(0x14); // f64x2.splat
export const AND = 0x71;

/** `while (cur < end) body` over i32 locals (unsigned compare; body must advance cur). */
export const whileLt = (cur: number, end: number, body: number[]): number[] => [
  ...BLOCK, ...get(cur), ...get(end), LT_U, EQZ, ...brIf(0),
  ...LOOP, ...body, ...get(cur), ...get(end), LT_U, ...brIf(0), END,
  END,
];

/** i32 local l += n. */
export const bump = (l: number, n: number): number[] => [...get(l), ...i32c(n), ADD, ...set(l)];
