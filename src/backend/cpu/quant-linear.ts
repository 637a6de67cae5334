// Linear layers and experts over quantized weights as stored (block FP8, MXFP4: model/quant.ts), the CPU
// spec for them: each weight row is dequantized into a row-sized scratch just before its dot products
// (float64 sums, one float32 rounding on store, exactly `dot`'s order), and used for every input of the
// batch, so no float32 copy of the matrix exists and every output is bit-identical to computing with the
// dequantized float32 matrix. These run on the calling thread in JS, also when the backend has threads and
// the SIMD kernel (the float32 layers keep those): the JS loop is the spec, and there is no second version.
import { dequantRow, type QuantMatrix } from '../../model/quant.ts';
import { dot, dot2 } from './linalg.ts';
import { clampedAct, swigluAct } from './moe-ops.ts';
import type { ClampedSwiglu } from '../../model/spec.ts';

/** One dequantized weight row (and a second for gate/up pairs), grown on demand; the ops are single-threaded. */
let rowA = new Float32Array(0);
let rowB = new Float32Array(0);

function scratch(n: number): void {
  if (rowA.length < n) {
    rowA = new Float32Array(n);
    rowB = new Float32Array(n);
  }
}

/** y = W x for `rows` inputs, as linalg.ts `linear` (x [rows][cols], y [rows][W.rows]). */
export function linearQ(y: Float32Array, w: QuantMatrix, x: Float32Array, rows: number): void {
  const { rows: outDim, cols: inDim } = w;
  scratch(inDim);
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
    dequantRow(e.gate, j, rowA);
    dequantRow(e.up, j, rowB);
    act[j] = unitAct(dot(rowA, 0, x, xA, hidden), dot(rowB, 0, x, xA, hidden), e, j, clamped);
    if (two) act[inter + j] = unitAct(dot(rowA, 0, x, xB, hidden), dot(rowB, 0, x, xB, hidden), e, j, clamped);
  }
  for (let o = 0; o < hidden; o++) {
    dequantRow(e.down, o, rowA);
    out[outA + o] = downOut(dot(rowA, 0, act, 0, inter), e, o, clamped);
    if (two) out[outB + o] = downOut(dot(rowA, 0, act, inter, inter), e, o, clamped);
  }
}

function unitAct(g: number, u: number, e: QuantExpert, j: number, clamped: ClampedSwiglu | undefined): number {
  return clamped ? clampedAct(g, u, e.gateBias![j]!, e.upBias![j]!, clamped) : swigluAct(g, u);
}

function downOut(sum: number, e: QuantExpert, o: number, clamped: ClampedSwiglu | undefined): number {
  return clamped ? Math.fround(sum) + e.downBias![o]! : sum;
}
