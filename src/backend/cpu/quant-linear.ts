// Linear layers and experts over weights kept as stored (block FP8, MXFP4, INT4, bf16: model/quant.ts), the CPU
// spec for them: for one or two inputs the weights are dequantized per block inside the dot products
// (quant-dot.ts); for a batch each weight row is dequantized once into a row scratch and used for every
// input. Either way float64 sums in exactly `dot`'s order with one float32 rounding on store, so no float32
// copy of a matrix exists and every output is bit-identical to computing with the dequantized matrix. JS
// only, whatever the SIMD setting (the float32 layers keep the kernel): the JS loop is the spec, and there is
// no second version. Projections run on the calling thread; expert units may be shared out to the worker
// threads (computeQuantUnits runs on each).
import { dequantRow, type QuantMatrix } from '../../model/quant.ts';
import { dot, dot2 } from './linalg.ts';
import { dotBf16, dotFp8, dotInt4, dotMxfp4, fusedFp8, fusedInt4 } from './quant-dot.ts';
import { clampedAct, swigluAct } from './moe-ops.ts';
import type { ClampedSwiglu } from '../../model/spec.ts';
import { UNIT, unitPairs } from './expert-units.ts';

/** One dequantized weight row, grown on demand, and the sums of rowDot (per thread: each has this module). */
let rowA = new Float32Array(0);
const sums = new Float64Array(2);

function scratch(n: number): void {
  if (rowA.length < n) rowA = new Float32Array(n);
}

/**
 * sums[0] = row r of w . x[xA..), and when xB >= 0 sums[1] = row r . x[xB..): fused (quant-dot.ts) where the
 * format allows it, else through a dequantized row (rowA); either way exactly `dot`'s sum.
 */
function rowDot(w: QuantMatrix, r: number, x: Float32Array, xA: number, xB: number): void {
  if (w.format === 'mxfp4') return dotMxfp4(sums, w, r, x, xA, xB);
  if (w.format === 'bf16') return dotBf16(sums, w, r, x, xA, xB);
  if (w.format === 'fp8' && fusedFp8(w)) return dotFp8(sums, w, r, x, xA, xB);
  if (w.format === 'int4' && fusedInt4(w)) return dotInt4(sums, w, r, x, xA, xB);
  dequantRow(w, r, rowA);
  sums[0] = dot(rowA, 0, x, xA, w.cols);
  if (xB >= 0) sums[1] = dot(rowA, 0, x, xB, w.cols);
}

/**
 * y = W x for `rows` inputs, as linalg.ts `linear` (x [rows][cols], y [rows][W.rows]). One or two inputs:
 * dequantized inside the dot products; more: each weight row dequantized once into a row scratch and used
 * for every input.
 */
export function linearQ(y: Float32Array, w: QuantMatrix, x: Float32Array, rows: number): void {
  const { rows: outDim, cols: inDim } = w;
  scratch(inDim);
  if (rows <= 2) {
    for (let o = 0; o < outDim; o++) {
      rowDot(w, o, x, 0, rows === 2 ? inDim : -1);
      y[o] = sums[0]!;
      if (rows === 2) y[outDim + o] = sums[1]!;
    }
    return;
  }
  for (let o = 0; o < outDim; o++) {
    dequantRow(w, o, rowA);
    let r = 0;
    for (; r + 1 < rows; r += 2) dot2(y, r * outDim + o, (r + 1) * outDim + o, rowA, 0, x, r * inDim, (r + 1) * inDim, inDim);
    if (r < rows) y[r * outDim + o] = dot(rowA, 0, x, r * inDim, inDim);
  }
}

/** A quantized expert row of a bank: its three matrices and, for gpt-oss, its biases (views into the row). */
export interface QuantExpert {
  readonly gate: QuantMatrix; // [I][H]
  readonly up: QuantMatrix; // [I][H]
  readonly down: QuantMatrix; // [H][I]
  readonly gateBias?: Float32Array;
  readonly upBias?: Float32Array;
  readonly downBias?: Float32Array;
}

/**
 * The expert on one or two tokens (outB / xB -1: one): out[outA..+H) = expert(x[xA..+H)). SwiGLU, or with
 * `clamped` gpt-oss's clamped SwiGLU with biases, each rounding as moe-ops.ts's float32 experts do.
 * act: scratch of 2*I floats.
 */
export function quantExpert(
  out: Float32Array,
  outA: number,
  outB: number,
  e: QuantExpert,
  x: Float32Array,
  xA: number,
  xB: number,
  hidden: number,
  inter: number,
  act: Float32Array,
  clamped?: ClampedSwiglu,
): void {
  scratch(Math.max(hidden, inter));
  const two = outB >= 0;
  for (let j = 0; j < inter; j++) {
    rowDot(e.gate, j, x, xA, xB);
    const gA = sums[0]!;
    const gB = sums[1]!;
    rowDot(e.up, j, x, xA, xB);
    act[j] = unitAct(gA, sums[0]!, e, j, clamped);
    if (two) act[inter + j] = unitAct(gB, sums[1]!, e, j, clamped);
  }
  for (let o = 0; o < hidden; o++) {
    rowDot(e.down, o, act, 0, two ? inter : -1);
    out[outA + o] = downOut(sums[0]!, e, o, clamped);
    if (two) out[outB + o] = downOut(sums[1]!, e, o, clamped);
  }
}

function unitAct(g: number, u: number, e: QuantExpert, j: number, clamped: ClampedSwiglu | undefined): number {
  return clamped ? clampedAct(g, u, e.gateBias![j]!, e.upBias![j]!, clamped) : swigluAct(g, u);
}

function downOut(sum: number, e: QuantExpert, o: number, clamped: ClampedSwiglu | undefined): number {
  return clamped ? Math.fround(sum) + e.downBias![o]! : sum;
}

/**
 * Expert units [u0, u1) (expert-units.ts) over quantized bank rows into `out` ([picks][H]): `rows` the views
 * of every bank row (CpuExpertBanks.quantRows), `rowSize` words a row. act: scratch of 2*I floats.
 */
export function computeQuantUnits(
  out: Float32Array,
  units: Int32Array,
  unitPicks: Int32Array,
  u0: number,
  u1: number,
  rows: readonly (readonly QuantExpert[])[],
  rowSize: number,
  x: Float32Array,
  hidden: number,
  inter: number,
  act: Float32Array,
  clamped?: ClampedSwiglu,
): void {
  for (let n = u0; n < u1; n++) {
    const e = rows[units[n * UNIT]!]![units[n * UNIT + 1]! / rowSize]!;
    unitPairs(units, unitPicks, n, (outA, outB, xA, xB) => quantExpert(out, outA, outB, e, x, xA, xB, hidden, inter, act, clamped));
  }
}
