// Dot products straight from quantized rows, dequantizing per block inside the sum: block FP8 through a
// 256-entry table per block (float32(e4m3 x scale), the stored value of every byte of that block), MXFP4
// through a 16-entry table per group of 32 (E2M1 x 2^(scale - 127), exact). Each sum keeps linalg.ts
// `dot`'s order (four float64 lanes over i % 4, the tail on the first, (s0 + s1) + (s2 + s3)), so results
// are bit-identical to `dot` over the dequantized row. FP8 needs blocks of a multiple of 4 columns for that
// order to survive block boundaries (`fusedFp8`); other block widths take the row-scratch path. bf16 rows kept
// as stored read each value's float32 from a 65536-entry table (exact; as fast as a float32 row here, at half
// the bytes). INT4 computes each value (q - z) x s from its group's scale and zero (exact, quant.ts Int4Matrix) inside
// the sum, in `dot`'s order where groups are a multiple of 4 wide (`fusedInt4`).
import { FP4_VALUES, FP8_E4M3_VALUES, INT4_SYMMETRIC_ZERO, int4Scale, type Bf16Matrix, type Fp8Matrix, type Int4Matrix, type Mxfp4Matrix } from '../../model/quant.ts';

/**
 * The FP8 tables of a few (matrix, block row) pairs, so an expert's gate, up and down rows, read in turn,
 * keep theirs: each is rebuilt only when a sweep of rows crosses into the next block row. A table is a function
 * of its block row's scales alone, and those are checked on every hit: a bank row's matrix is a view that
 * outlives its expert (swapRows writes another expert's bytes and scales into it, the same object), so the
 * object and block row alone would hand a worker the tables of the expert that was there before.
 */
const SLOTS = 4;
const luts: Float32Array[] = Array.from({ length: SLOTS }, () => new Float32Array(0));
const lutOf: (Fp8Matrix | null)[] = new Array<Fp8Matrix | null>(SLOTS).fill(null);
const lutRow = new Int32Array(SLOTS).fill(-1);
/** The scales each table was built from. */
const lutScales: Float32Array[] = Array.from({ length: SLOTS }, () => new Float32Array(0));
let nextSlot = 0;
const fp4Lut = new Float64Array(16);

/** Whether `dotFp8` keeps `dot`'s order for this matrix (its blocks are a multiple of 4 columns wide). */
export function fusedFp8(m: Fp8Matrix): boolean {
  return m.block[1] % 4 === 0;
}

/** Whether the table in slot k was built from the scales m holds now at block row br (nb blocks). */
function sameScales(k: number, m: Fp8Matrix, br: number, nb: number): boolean {
  const had = lutScales[k]!;
  for (let j = 0; j < nb; j++) if (!Object.is(had[j], m.scales[br * nb + j])) return false;
  return true;
}

function tablesFor(m: Fp8Matrix, r: number): Float32Array {
  const br = Math.floor(r / m.block[0]);
  const nb = Math.ceil(m.cols / m.block[1]);
  let k = lutOf.indexOf(m);
  if (k >= 0 && lutRow[k] === br && sameScales(k, m, br, nb)) return luts[k]!;
  if (k < 0) {
    k = nextSlot;
    nextSlot = (nextSlot + 1) % SLOTS;
  }
  if (luts[k]!.length < 256 * nb) luts[k] = new Float32Array(256 * nb);
  if (lutScales[k]!.length < nb) lutScales[k] = new Float32Array(nb);
  lutScales[k]!.set(m.scales.subarray(br * nb, br * nb + nb));
  const lut = luts[k]!;
  for (let j = 0; j < nb; j++) {
    const s = m.scales[br * nb + j]!;
    // The Float32Array store rounds once: float32(e4m3 x scale), as dequantRow.
    for (let b = 0; b < 256; b++) lut[j * 256 + b] = FP8_E4M3_VALUES[b]! * s;
  }
  lutOf[k] = m;
  lutRow[k] = br;
  return lut;
}

/**
 * out[0] = row r of m . x[xA..), and when xB >= 0 out[1] = row r . x[xB..) (the weights read once for both).
 * m's blocks must be fusedFp8.
 */
export function dotFp8(out: Float64Array, m: Fp8Matrix, r: number, x: Float32Array, xA: number, xB: number): void {
  const lut = tablesFor(m, r);
  const n = m.cols;
  const bc = m.block[1];
  const d = m.data;
  const at = r * n;
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0; // prettier-ignore
  const two = xB >= 0;
  for (let c0 = 0, base = 0; c0 < n; c0 += bc, base += 256) {
    const c1 = Math.min(c0 + bc, n);
    let i = c0;
    for (; i + 3 < c1; i += 4) {
      const w0 = lut[base + d[at + i]!]!;
      const w1 = lut[base + d[at + i + 1]!]!;
      const w2 = lut[base + d[at + i + 2]!]!;
      const w3 = lut[base + d[at + i + 3]!]!;
      s0 += w0 * x[xA + i]!;
      s1 += w1 * x[xA + i + 1]!;
      s2 += w2 * x[xA + i + 2]!;
      s3 += w3 * x[xA + i + 3]!;
      if (two) {
        t0 += w0 * x[xB + i]!;
        t1 += w1 * x[xB + i + 1]!;
        t2 += w2 * x[xB + i + 2]!;
        t3 += w3 * x[xB + i + 3]!;
      }
    }
    // Only the last block can end off a multiple of 4: this is `dot`'s tail.
    for (; i < c1; i++) {
      const w = lut[base + d[at + i]!]!;
      s0 += w * x[xA + i]!;
      if (two) t0 += w * x[xB + i]!;
    }
  }
  out[0] = s0 + s1 + (s2 + s3);
  if (two) out[1] = t0 + t1 + (t2 + t3);
}

/** As dotFp8, for an MXFP4 matrix (groups of 32: always `dot`'s order). */
export function dotMxfp4(out: Float64Array, m: Mxfp4Matrix, r: number, x: Float32Array, xA: number, xB: number): void {
  const groups = m.cols / 32;
  const d = m.data;
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0; // prettier-ignore
  const two = xB >= 0;
  for (let g = 0; g < groups; g++) {
    const s = 2 ** (m.scales[r * groups + g]! - 127);
    for (let v = 0; v < 16; v++) fp4Lut[v] = FP4_VALUES[v]! * s;
    const src = (r * groups + g) * 16;
    const c = g * 32;
    for (let b = 0; b < 16; b += 2) {
      const lo = d[src + b]!;
      const hi = d[src + b + 1]!;
      const w0 = fp4Lut[lo & 15]!;
      const w1 = fp4Lut[lo >> 4]!;
      const w2 = fp4Lut[hi & 15]!;
      const w3 = fp4Lut[hi >> 4]!;
      const i = c + 2 * b;
      s0 += w0 * x[xA + i]!;
      s1 += w1 * x[xA + i + 1]!;
      s2 += w2 * x[xA + i + 2]!;
      s3 += w3 * x[xA + i + 3]!;
      if (two) {
        t0 += w0 * x[xB + i]!;
        t1 += w1 * x[xB + i + 1]!;
        t2 += w2 * x[xB + i + 2]!;
        t3 += w3 * x[xB + i + 3]!;
      }
    }
  }
  out[0] = s0 + s1 + (s2 + s3);
  if (two) out[1] = t0 + t1 + (t2 + t3);
}

/** Whether `dotInt4` keeps `dot`'s order for this matrix (its groups are a multiple of 4 wide). */
export function fusedInt4(m: Int4Matrix): boolean {
  return m.block[1] % 4 === 0;
}

/** As dotFp8, for an INT4 matrix whose groups are fusedInt4. */
export function dotInt4(out: Float64Array, m: Int4Matrix, r: number, x: Float32Array, xA: number, xB: number): void {
  const n = m.cols;
  const g = m.block[1];
  const groups = n / g;
  const d = m.data;
  const zeros = m.zeros.length > 0 ? m.zeros : null;
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0; // prettier-ignore
  const two = xB >= 0;
  for (let j = 0, at = (r * n) >> 1; j < groups; j++) {
    const s = int4Scale(m.scales[r * groups + j]!, m.scaleType);
    const z = zeros ? zeros[r * groups + j]! : INT4_SYMMETRIC_ZERO;
    for (let i = j * g, end = i + g; i < end; i += 4, at += 2) {
      const lo = d[at]!;
      const hi = d[at + 1]!;
      const w0 = ((lo & 15) - z) * s;
      const w1 = ((lo >> 4) - z) * s;
      const w2 = ((hi & 15) - z) * s;
      const w3 = ((hi >> 4) - z) * s;
      s0 += w0 * x[xA + i]!;
      s1 += w1 * x[xA + i + 1]!;
      s2 += w2 * x[xA + i + 2]!;
      s3 += w3 * x[xA + i + 3]!;
      if (two) {
        t0 += w0 * x[xB + i]!;
        t1 += w1 * x[xB + i + 1]!;
        t2 += w2 * x[xB + i + 2]!;
        t3 += w3 * x[xB + i + 3]!;
      }
    }
  }
  out[0] = s0 + s1 + (s2 + s3);
  if (two) out[1] = t0 + t1 + (t2 + t3);
}

/** Every bf16 bit pattern's float32 value (256 KiB, made on first use). */
let bf16Values: Float32Array | null = null;

function bf16Table(): Float32Array {
  if (bf16Values === null) {
    bf16Values = new Float32Array(65536);
    const bits = new Uint32Array(bf16Values.buffer);
    for (let h = 0; h < 65536; h++) bits[h] = h << 16;
  }
  return bf16Values;
}

/** As dotFp8, for a bf16 matrix kept as stored. */
export function dotBf16(out: Float64Array, m: Bf16Matrix, r: number, x: Float32Array, xA: number, xB: number): void {
  const t = bf16Table();
  const n = m.cols;
  const d = m.data;
  const at = r * n;
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0; // prettier-ignore
  const two = xB >= 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const w0 = t[d[at + i]!]!;
    const w1 = t[d[at + i + 1]!]!;
    const w2 = t[d[at + i + 2]!]!;
    const w3 = t[d[at + i + 3]!]!;
    s0 += w0 * x[xA + i]!;
    s1 += w1 * x[xA + i + 1]!;
    s2 += w2 * x[xA + i + 2]!;
    s3 += w3 * x[xA + i + 3]!;
    if (two) {
      t0 += w0 * x[xB + i]!;
      t1 += w1 * x[xB + i + 1]!;
      t2 += w2 * x[xB + i + 2]!;
      t3 += w3 * x[xB + i + 3]!;
    }
  }
  for (; i < n; i++) {
    const w = t[d[at + i]!]!;
    s0 += w * x[xA + i]!;
    if (two) t0 += w * x[xB + i]!;
  }
  out[0] = s0 + s1 + (s2 + s3);
  if (two) out[1] = t0 + t1 + (t2 + t3);
}
