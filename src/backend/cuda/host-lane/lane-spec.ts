// The spec, for tests, of the GPU gemv's orders (bf16, block FP8 and MXFP4) and of the host lane
// (host-lane/host_experts.c) that copies them: every float32 operation written out in JS (Math.fround for one rounding,
// fmaf32 for a fused one).
import { FP4_VALUES } from '../../../model/quant.ts';
import type { LaneGrid, LaneRow } from './lane-row.ts';

/** Largest finite float32 and the midpoint between it and 2^128 (at or above which a sum rounds to infinity). */
const FLT_MAX = 3.4028234663852886e38;
const OVERFLOW_MIDPOINT = 3.4028235677973366e38;

/**
 * fmaf(a, b, c) of float32 values: a * b + c rounded once to float32 (nearest, ties to even). a * b is exact in
 * float64; s = p + c rounded to float64 has an exact error e (TwoSum). Rounding s again to float32 is right
 * unless s landed exactly on a float32 midpoint that the exact p + c (= s + e) is not on: then e picks the side.
 * (float64 rounding is monotonic and float32 midpoints are float64 values, so s never crosses one.)
 */
export function fmaf32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c; // an exact zero keeps IEEE's sign (+0 unless both are -0); non-finite cases follow float64
  const r = Math.fround(s);
  if (r === s || !Number.isFinite(s)) return r;
  const bv = s - p;
  const e = (p - (s - bv)) + (c - bv);
  if (e === 0) return r;
  if (!Number.isFinite(r)) return Math.abs(s) === OVERFLOW_MIDPOINT && e * s < 0 ? Math.sign(s) * FLT_MAX : r;
  const other = r + 2 * (s - r); // s's other float32 neighbour when s is a midpoint
  if (Math.fround(other) !== other) return r;
  return (other - r > 0) === (e > 0) ? other : r;
}

/** rintf: nearest integer, ties to even, keeping the sign of a zero. */
function rintf(v: number): number {
  const f = Math.floor(v), d = v - f;
  const n = d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  return n === 0 ? v * 0 : n;
}

const LOG2E = Math.fround(1.44269504088896341);
const LN2_HI = Math.fround(-0.693359375);
const LN2_LO = Math.fround(2.12194440e-4);
const POLY = [1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1].map(Math.fround);
const POLY0 = Math.fround(1.9875691500e-4);

/** exact_math.cuh's exact_expf: e^x within 2 ulp for x in [-87, 88]; below 0, above +inf, NaN stays NaN. */
export function exactExpf(x: number): number {
  if (x !== x) return x;
  if (x > 88) return Infinity;
  if (x < -87) return 0;
  const n = rintf(Math.fround(x * LOG2E));
  let r = fmaf32(n, LN2_HI, x);
  r = fmaf32(n, LN2_LO, r);
  let p = POLY0;
  for (const k of POLY) p = fmaf32(p, r, k);
  p = fmaf32(p, Math.fround(r * r), r);
  p = Math.fround(p + 1);
  return Math.fround(p * 2 ** n); // 2^n: n + 127 in 1..254, a normal float32 built from its bits in C
}

/** exact_silu: g / (1 + e^-g). (float64 then one fround is exact for + - * /: 53 >= 2 * 24 + 2.) */
export function exactSilu(g: number): number {
  return Math.fround(g / Math.fround(1 + exactExpf(-g)));
}

/** exact_swiglu: silu(gate) x up. */
export function exactSwiglu(g: number, u: number): number {
  return Math.fround(exactSilu(g) * u);
}

/** C's fminf / fmaxf (the GPU's min.f32 / max.f32): a NaN operand gives way to the other. */
const fminf = (a: number, b: number): number => (a !== a ? b : b !== b ? a : Math.min(a, b));
const fmaxf = (a: number, b: number): number => (a !== a ? b : b !== b ? a : Math.max(a, b));

/**
 * exact_swiglu_clamped (gpt-oss, limit > 0): gate clamped above at limit, up to [-limit, limit] (a NaN sum gives way
 * to the bound), then (up + 1) x (gate x sigmoid(alpha gate)), sigmoid(v) = 1 / (1 + e^-v). limit and alpha are the
 * float32 values the kernels get.
 */
export function exactSwigluClamped(g: number, u: number, limit: number, alpha: number): number {
  const L = Math.fround(limit), A = Math.fround(alpha);
  const gc = fminf(g, L), uc = fminf(fmaxf(u, -L), L);
  const sig = Math.fround(1 / Math.fround(1 + exactExpf(-Math.fround(gc * A))));
  return Math.fround(Math.fround(uc + 1) * Math.fround(gc * sig));
}

/** The warp's butterfly over 32 lane sums (lane l adds lane l ^ o, o = 16 .. 1): lane 0's. */
export function butterfly(acc: number[]): number {
  for (let o = 16; o > 0; o >>= 1) acc = acc.map((v, l) => Math.fround(v + acc[l ^ o]!));
  return acc[0]!;
}

const bf16Bits = new Uint32Array(1);
const bf16Float = new Float32Array(bf16Bits.buffer);
function bf16(bits: number): number {
  bf16Bits[0] = bits << 16;
  return bf16Float[0]!;
}

/**
 * One dot of the gemv: K bf16 weights from w[wOffset] with x (K % 8 == 0). Lane c % 32 takes chunk c (values
 * 8c..8c+7) in ascending c, one fused multiply-add a value; then the butterfly (lane l adds lane l ^ o, o = 16 .. 1).
 */
export function gpuDot(w: Uint16Array, wOffset: number, x: Float32Array, K: number): number {
  if (K % 8 !== 0) throw new Error(`gpuDot: K ${K} is not a multiple of 8`);
  const acc = new Array<number>(32).fill(0);
  for (let c = 0; c < K / 8; c++) {
    let a = acc[c % 32]!;
    for (let e = 0; e < 8; e++) a = fmaf32(bf16(w[wOffset + 8 * c + e]!), x[8 * c + e]!, a);
    acc[c % 32] = a;
  }
  return butterfly(acc);
}

/**
 * A float8_e4m3fn byte's value (exact, fp8x8_to_float's): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent
 * 0 holds the zeros (either sign) and the subnormals m x 2^-9; S.1111.111 is NaN.
 */
export function e4m3Value(b: number): number {
  const e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7f) === 0x7f) return NaN;
  const v = e ? (8 + m) * 2 ** (e - 10) : m * 2 ** -9;
  return b & 0x80 ? -v : v;
}
const E4M3 = Float64Array.from({ length: 256 }, (_, b) => e4m3Value(b));

/**
 * One dot of the gemv over block-FP8 weights (gemv.cuh's dot_load_fp8): K e4m3 bytes from w[wOffset] with x
 * (K % 16 == 0), chunk c (values 16c..16c+15, one 16-byte load) scaled by scales[sOffset + floor(16c / sCols)]. Lane
 * c % 32 takes chunk c in ascending c: d = fma(w_e, x_e, d) from +0 in value order, then acc = fma(scale, d, acc);
 * then the butterfly.
 */
export function gpuDotFp8(w: Uint8Array, wOffset: number, scales: Float32Array, sOffset: number, sCols: number, x: Float32Array, K: number): number {
  if (K % 16 !== 0) throw new Error(`gpuDotFp8: K ${K} is not a multiple of 16`);
  const acc = new Array<number>(32).fill(0);
  for (let c = 0; c < K / 16; c++) {
    let d = 0;
    for (let e = 0; e < 16; e++) d = fmaf32(E4M3[w[wOffset + 16 * c + e]!]!, x[16 * c + e]!, d);
    acc[c % 32] = fmaf32(scales[sOffset + Math.floor((16 * c) / sCols)]!, d, acc[c % 32]!);
  }
  return butterfly(acc);
}

/**
 * An MXFP4 weight (exact, fp4x8_scaled's): E2M1 code n (sign, 2 exponent bits, 1 mantissa bit) times its block's E8M0
 * scale byte s, 2^(s - 127) (s = 0: 2^-127). Every such value is a float32 for s <= 252 (the uploads refuse more).
 */
export function mxfp4Value(n: number, s: number): number {
  return Math.fround(FP4_VALUES[n & 15]! * 2 ** (s - 127));
}

/**
 * One dot of the gemv over MXFP4 weights (gemv.cuh's dot_word_mxfp4): K values (K % 32 == 0) as K / 2 bytes from
 * w[wOffset], two E2M1 codes a byte (low nibble first), chunk c (values 32c..32c+31, one 16-byte load) scaled by
 * its E8M0 byte scales[sOffset + c]. Lane c % 32 takes chunk c in ascending c, and of it each word of 8 values in
 * turn: d = w_0 x_0, d = fma(w_e, x_e, d) for e = 1 .. 7, acc = acc + d; then the butterfly.
 */
export function gpuDotMxfp4(w: Uint8Array, wOffset: number, scales: Uint8Array, sOffset: number, x: Float32Array, K: number): number {
  if (K % 32 !== 0) throw new Error(`gpuDotMxfp4: K ${K} is not a multiple of 32`);
  const acc = new Array<number>(32).fill(0);
  const value = new Float64Array(16);
  for (let c = 0; c < K / 32; c++) {
    const s = scales[sOffset + c]!;
    for (let n = 0; n < 16; n++) value[n] = mxfp4Value(n, s);
    let a = acc[c % 32]!;
    for (let i = 0; i < 4; i++) {
      const v = 32 * c + 8 * i, at = wOffset + v / 2;
      let d = 0;
      for (let e = 0; e < 8; e++) {
        const b = w[at + (e >> 1)]!, wv = value[e & 1 ? b >> 4 : b & 15]!;
        d = e === 0 ? Math.fround(wv * x[v]!) : fmaf32(wv, x[v + e]!, d);
      }
      a = Math.fround(a + d);
    }
    acc[c % 32] = a;
  }
  return butterfly(acc);
}

/** A bf16 matrix of n values at byte offset `off` of the row (copied: the offset need not be even). */
function matrix(row: Uint8Array, off: number, n: number): Uint16Array {
  return new Uint16Array(row.slice(off, off + 2 * n).buffer);
}

/** One matrix of the expert as the GPU reads it: row r's dot with x, and its bias (0 when none: the GPU adds +0). */
interface RowDot { dot(r: number, x: Float32Array): number; bias(r: number): number | null }

/**
 * Matrix `which` of the row (`rows` rows of K values): row r is the matrix's row r x step (gate and up interleaved:
 * step 2, each from its own first row), bf16, block FP8 with its float grid, or MXFP4 with its E8M0 bytes.
 */
function rowDot(row: Uint8Array, at: LaneRow, which: 'gate' | 'up' | 'down', rows: number, K: number): RowDot {
  const step = which === 'down' ? 1 : at.step ?? 1;
  const span = (rows - 1) * step + 1; // the matrix's rows from its first, the other matrix's between
  const biasAt = at.bias?.[which];
  const biases = biasAt === undefined ? null : matrix(row, biasAt, span);
  const bias = (r: number): number | null => (biases ? bf16(biases[r * step]!) : null);
  const e8m0 = at.e8m0?.[which], grid: LaneGrid | undefined = at.scales?.[which];
  if (e8m0 !== undefined) {
    const w = row.slice(at[which], at[which] + (span * K) / 2), scales = row.slice(e8m0, e8m0 + (span * K) / 32);
    return { dot: (r, x) => gpuDotMxfp4(w, (r * step * K) / 2, scales, (r * step * K) / 32, x, K), bias };
  }
  if (!grid) {
    const w = matrix(row, at[which], span * K);
    return { dot: (r, x) => gpuDot(w, r * step * K, x, K), bias };
  }
  if (step !== 1) throw new Error('rowDot: block-FP8 gate and up rows are not interleaved');
  const w = row.slice(at[which], at[which] + rows * K);
  const scales = new Float32Array(row.slice(grid.at, grid.at + 4 * Math.ceil(rows / grid.rows) * grid.ld).buffer);
  return { dot: (r, x) => gpuDotFp8(w, r * K, scales, Math.floor(r / grid.rows) * grid.ld, grid.cols, x, K), bias };
}

/**
 * One SwiGLU expert: gate [I][H], up [I][H], down [H][I] as `at` places them in the row. h[j] = act(gate_j . x + bg_j,
 * up_j . x + bu_j), each bias 0 when there is none (the GPU's +0 turns -0 into +0), act exact_swiglu or with `clamp`
 * exact_swiglu_clamped (as product.cuh's swiglu_act, only a limit > 0 clamps: another one is plain SwiGLU there and in
 * host_experts.c); y[f] = down_f . h, plus its bias when there is one (else as summed).
 */
export function expertSpec(row: Uint8Array, at: LaneRow, H: number, I: number, x: Float32Array): { h: Float32Array; y: Float32Array } {
  const gate = rowDot(row, at, 'gate', I, H), up = rowDot(row, at, 'up', I, H), down = rowDot(row, at, 'down', H, I);
  const h = new Float32Array(I), y = new Float32Array(H);
  for (let j = 0; j < I; j++) {
    const g = Math.fround(gate.dot(j, x) + (gate.bias(j) ?? 0)), u = Math.fround(up.dot(j, x) + (up.bias(j) ?? 0));
    h[j] = at.clamp && Math.fround(at.clamp.limit) > 0 ? exactSwigluClamped(g, u, at.clamp.limit, at.clamp.alpha) : exactSwiglu(g, u);
  }
  for (let f = 0; f < H; f++) {
    const b = down.bias(f), d = down.dot(f, h);
    y[f] = b === null ? d : Math.fround(d + b);
  }
  return { h, y };
}
