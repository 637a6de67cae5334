// Quantized weight matrices as the checkpoint stores them (block FP8 and MXFP4) and the definition of their
// values: what every backend's dot product must compute with. Rows are dequantized one at a time
// (`dequantRow`), so no float32 copy of a quantized matrix ever needs to exist.
//
// Block FP8 (Qwen3-*-FP8, DeepSeek-V3): one float8_e4m3fn byte per value [rows][cols] and a float32 scale per
// block of [blockRows][blockCols] values (`*.weight_scale_inv`, [ceil(rows/br)][ceil(cols/bc)]: the trailing
// blocks may be partial); value = float32(e4m3 x scale), as transformers' dequantizing loader computes it.
// MXFP4 (gpt-oss): [rows][cols/32][16] bytes, two E2M1 values a byte (low nibble first), and an E8M0 byte
// per group of 32 values [rows][cols/32]; value = e2m1 x 2^(scale - 127), exact in float32.
// bf16 matrices kept as stored read the same way (widened a row at a time, exact).
// INT4 (GPTQ, AWQ, compressed-tensors pack-quantized): repacked at load into one form, Int4Matrix below.
import { f16BitsToF32Bits } from './float-convert.ts';

/** The 16 E2M1 values by code. */
export const FP4_VALUES = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6] as const;

/** The 256 float8_e4m3fn values by byte (bias 7, subnormals, no infinities; 0x7F and 0xFF are NaN). */
export const FP8_E4M3_VALUES: Float64Array = (() => {
  const t = new Float64Array(256);
  for (let b = 0; b < 256; b++) {
    const sign = b & 0x80 ? -1 : 1;
    const e = (b >> 3) & 15;
    const m = b & 7;
    t[b] = (b & 0x7f) === 0x7f ? NaN : sign * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
  }
  return t;
})();

/** The largest finite float8_e4m3fn magnitude. */
export const FP8_E4M3_MAX = 448;

/** A block-FP8 matrix [rows][cols]. */
export interface Fp8Matrix {
  readonly format: 'fp8';
  readonly rows: number;
  readonly cols: number;
  /** One e4m3 byte per value, row-major [rows][cols]. */
  readonly data: Uint8Array;
  /** One scale per block, [ceil(rows / block[0])][ceil(cols / block[1])]. */
  readonly scales: Float32Array;
  /** Values sharing one scale: [blockRows, blockCols] (config.json weight_block_size). */
  readonly block: readonly [number, number];
}

/** An MXFP4 matrix [rows][cols] (cols a multiple of 32). */
export interface Mxfp4Matrix {
  readonly format: 'mxfp4';
  readonly rows: number;
  readonly cols: number;
  /** [rows][cols/32][16] bytes, two E2M1 values a byte, low nibble first. */
  readonly data: Uint8Array;
  /** One E8M0 byte per group of 32 values of a row, [rows][cols/32]. */
  readonly scales: Uint8Array;
  /** Always [1, 32]. */
  readonly block: readonly [number, number];
}

/**
 * A bf16 matrix [rows][cols] kept as stored (RESIDENCY_CPU_BF16=stored): not quantized, but read like the
 * quantized ones, a row widened at a time (exact: bf16 is the top half of a float32).
 */
export interface Bf16Matrix {
  readonly format: 'bf16';
  readonly rows: number;
  readonly cols: number;
  /** The bf16 bit patterns, row-major [rows][cols]. */
  readonly data: Uint16Array;
  /** None (empty). */
  readonly scales: Uint8Array;
  /** Always [1, 1]. */
  readonly block: readonly [number, number];
}

/** A bf16 matrix kept as stored over `data` (its bit patterns, [rows][cols]). */
export function bf16Matrix(rows: number, cols: number, data: Uint16Array): Bf16Matrix {
  return { format: 'bf16', rows, cols, data, scales: new Uint8Array(0), block: [1, 1] };
}

/**
 * A 4-bit integer matrix [rows][cols]: the one form GPTQ, AWQ and compressed-tensors pack-quantized weights are
 * repacked into at load (int4-repack.ts), and the form the banks hold, swaps move and the kernels read. The layout,
 * written down here only:
 *   data   [rows][cols / 2] bytes, cols % 8 == 0: value c of row r in byte r * cols / 2 + (c >> 1), the low nibble
 *          for even c; so 32-bit word w of a row (little-endian) holds values 8w .. 8w + 7 at bits 4j, as
 *          compressed-tensors' pack_to_int32 packs along a row. Codes q are unsigned, 0 .. 15.
 *   scales [rows][cols / group] 16-bit patterns, fp16 or bf16 (`scaleType`) as the checkpoint stores them.
 *   zeros  [rows][cols / group] bytes, each group's zero point z (0 .. 16: a GPTQ v1 zero is its stored 4 bits + 1),
 *          or empty for a symmetric matrix, where z = 8 for every group.
 * A row's groups are `group` consecutive values (block [1, group]); group divides cols.
 * value(r, c) = (q - z) x s, exact in float32: |q - z| <= 16 takes 5 bits, s at most 11 significant bits, and the
 * loader refuses a scale whose 16 x s overflows float32.
 */
export interface Int4Matrix {
  readonly format: 'int4';
  readonly rows: number;
  readonly cols: number;
  readonly data: Uint8Array;
  readonly scales: Uint16Array;
  readonly scaleType: Int4ScaleType;
  readonly zeros: Uint8Array;
  /** Always [1, group]. */
  readonly block: readonly [number, number];
}

/** How an INT4 matrix's scales are stored: fp16 (GPTQ, AWQ) or bf16 (compressed-tensors in a bf16 model). */
export type Int4ScaleType = 'f16' | 'bf16';

/** The zero point of every group of a symmetric INT4 matrix (its `zeros` empty). */
export const INT4_SYMMETRIC_ZERO = 8;

const scaleBits = new Uint32Array(1);
const scaleFloat = new Float32Array(scaleBits.buffer);
/** An INT4 scale's value from its 16 bits (exact). */
export function int4Scale(bits: number, type: Int4ScaleType): number {
  scaleBits[0] = type === 'bf16' ? bits << 16 : f16BitsToF32Bits(bits);
  return scaleFloat[0]!;
}

/** A matrix kept in its stored format (quantized, or bf16) rather than as float32. */
export type QuantMatrix = Fp8Matrix | Mxfp4Matrix | Bf16Matrix | Int4Matrix;

/** A weight matrix as the CPU backend computes with it: float32, or kept as stored. */
export type Matrix = Float32Array | QuantMatrix;

export function isQuantized(m: Matrix): m is QuantMatrix {
  return !(m instanceof Float32Array);
}

/** A bf16 matrix kept as stored. */
export function isBf16(m: Matrix): m is Bf16Matrix {
  return isQuantized(m) && m.format === 'bf16';
}

/** Values in a matrix. */
export function matrixSize(m: Matrix): number {
  return isQuantized(m) ? m.rows * m.cols : m.length;
}

/** Bytes the matrix holds as stored (data and scales; a float32 matrix 4 per value). */
export function matrixBytes(m: Matrix): number {
  if (!isQuantized(m)) return m.byteLength;
  return m.data.byteLength + m.scales.byteLength + (m.format === 'int4' ? m.zeros.byteLength : 0);
}

/** 32-bit views of the rows bf16 rows are widened into (one per output array). */
const bitsOf = new WeakMap<Float32Array, Uint32Array>();

/** Row `r` of `m` dequantized into out[0..cols): exactly the values the checkpoint defines. */
export function dequantRow(m: QuantMatrix, r: number, out: Float32Array): void {
  const cols = m.cols;
  if (m.format === 'bf16') {
    let bits = bitsOf.get(out);
    if (!bits) bitsOf.set(out, (bits = new Uint32Array(out.buffer, out.byteOffset, out.length)));
    const at = r * cols;
    for (let c = 0; c < cols; c++) bits[c] = m.data[at + c]! << 16;
    return;
  }
  if (m.format === 'fp8') {
    const [br, bc] = m.block;
    const scaleRow = Math.floor(r / br) * Math.ceil(cols / bc);
    const at = r * cols;
    const d = m.data;
    for (let c0 = 0, j = 0; c0 < cols; c0 += bc, j++) {
      const s = m.scales[scaleRow + j]!;
      const c1 = Math.min(c0 + bc, cols);
      // The Float32Array store rounds the float64 product once: float32(e4m3 x scale).
      for (let c = c0; c < c1; c++) out[c] = FP8_E4M3_VALUES[d[at + c]!]! * s;
    }
    return;
  }
  if (m.format === 'int4') {
    const g = m.block[1];
    const groups = cols / g;
    const d = m.data;
    const at = (r * cols) >> 1;
    for (let j = 0; j < groups; j++) {
      const s = int4Scale(m.scales[r * groups + j]!, m.scaleType);
      const z = m.zeros.length > 0 ? m.zeros[r * groups + j]! : INT4_SYMMETRIC_ZERO;
      // Exact: no rounding on the store (Int4Matrix).
      for (let c = j * g; c < (j + 1) * g; c++) out[c] = (((d[at + (c >> 1)]! >> ((c & 1) << 2)) & 15) - z) * s;
    }
    return;
  }
  const groups = cols / 32;
  for (let g = 0; g < groups; g++) {
    const at = r * groups + g;
    const s = 2 ** (m.scales[at]! - 127);
    const src = at * 16;
    const dst = g * 32;
    for (let b = 0; b < 16; b++) {
      const byte = m.data[src + b]!;
      out[dst + 2 * b] = FP4_VALUES[byte & 15]! * s;
      out[dst + 2 * b + 1] = FP4_VALUES[byte >> 4]! * s;
    }
  }
}

/** The whole matrix in float32 (tests and tools: the CPU backend dequantizes row by row instead). */
export function dequantize(m: Matrix): Float32Array {
  if (!isQuantized(m)) return m;
  const out = new Float32Array(m.rows * m.cols);
  for (let r = 0; r < m.rows; r++) dequantRow(m, r, out.subarray(r * m.cols, (r + 1) * m.cols));
  return out;
}

/** The listed rows of `m` as a matrix of their own, in that order (copies of the stored bytes). */
export function quantRows(m: Mxfp4Matrix, rows: readonly number[]): Mxfp4Matrix {
  const g = m.cols / 32;
  const data = new Uint8Array(rows.length * g * 16);
  const scales = new Uint8Array(rows.length * g);
  rows.forEach((r, i) => {
    data.set(m.data.subarray(r * g * 16, (r + 1) * g * 16), i * g * 16);
    scales.set(m.scales.subarray(r * g, (r + 1) * g), i * g);
  });
  return { format: 'mxfp4', rows: rows.length, cols: m.cols, data, scales, block: m.block };
}
