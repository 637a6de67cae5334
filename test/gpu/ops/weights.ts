// A dense product's weights drawn as stored: the CPU's matrices (one a stacked part: q | k | v, gate | up) and the
// device's bytes: the values stacked by rows, and the scale grid of block FP8 (fp8-grid.ts, as the backend builds
// it from each part's weight_scale_inv) or MXFP4's E8M0 bytes. The CPU side sums with the CPU backend's own dots.
import { bf16Matrix, type QuantMatrix } from '../../../src/model/quant.ts';
import { dotBf16, dotFp8, dotInt4, dotMxfp4 } from '../../../src/backend/cpu/quant-dot.ts';
import { fillFp8Grid, fp8Grid } from '../../../src/backend/cuda/weights/fp8-grid.ts';
import type { WeightFormat } from '../../../src/backend/cuda/weights/device-weights.ts';
import type { GemmArgs } from '../../../src/backend/cuda/step/kernel-args.ts';
import type { Draw } from './draw.ts';

export const FP8_BLOCK: readonly [number, number] = [128, 128];

export interface Weights {
  readonly format: WeightFormat;
  readonly parts: readonly QuantMatrix[];
  readonly rows: number;
  readonly cols: number;
  readonly values: Uint8Array;
  /** FP8: the grid (float32 bytes); MXFP4: the scale bytes; bf16: none. */
  readonly scales?: Uint8Array;
  /** The grid's shape as GemmProblem takes it. */
  readonly grid: Pick<GemmArgs, 'sRows' | 'sCols' | 'sLd'>;
}

export function drawWeights(draw: Draw, format: WeightFormat, partRows: readonly number[], cols: number): Weights {
  const rows = partRows.reduce((a, b) => a + b, 0);
  if (format === 'bf16') {
    const values = draw.bytes(2 * rows * cols, 'bf16');
    const bits = new Uint16Array(values.buffer);
    let at = 0;
    const parts = partRows.map((r) => {
      const m = bf16Matrix(r, cols, bits.subarray(at, at + r * cols));
      at += r * cols;
      return m;
    });
    return { format, parts, rows, cols, values, grid: {} };
  }
  if (format === 'fp8') {
    const values = draw.bytes(rows * cols, 'fp8');
    const [br, bc] = FP8_BLOCK;
    let at = 0;
    const parts = partRows.map((r): QuantMatrix => {
      const data = values.subarray(at, at + r * cols);
      at += r * cols;
      return { format: 'fp8', rows: r, cols, data, scales: draw.fp8Scales(Math.ceil(r / br) * Math.ceil(cols / bc)), block: FP8_BLOCK };
    });
    const g = fp8Grid(partRows, cols, FP8_BLOCK);
    const grid = fillFp8Grid(g, partRows, br, parts.map((p) => p.scales as Float32Array));
    return { format, parts, rows, cols, values, scales: new Uint8Array(grid.buffer), grid: { sRows: g.sRows, sCols: g.sCols, sLd: g.sLd } };
  }
  const g = cols / 32;
  const values = draw.bytes(rows * g * 16, 'fp4');
  const scales = draw.e8m0(rows * g);
  let at = 0;
  const parts = partRows.map((r): QuantMatrix => {
    const p: QuantMatrix = { format: 'mxfp4', rows: r, cols, data: values.subarray(16 * g * at, 16 * g * (at + r)), scales: scales.subarray(g * at, g * (at + r)), block: [1, 32] };
    at += r;
    return p;
  });
  return { format, parts, rows, cols, values, scales, grid: { sRows: 1, sCols: 32, sLd: g } };
}

const sums = new Float64Array(2);

/** Row r of matrix m . x[xOff..): the CPU backend's dot for the format (float64 sums in `dot`'s order). */
export function matrixDot(m: QuantMatrix, r: number, x: Float32Array, xOff: number): number {
  if (m.format === 'bf16') dotBf16(sums, m, r, x, xOff, -1);
  else if (m.format === 'fp8') dotFp8(sums, m, r, x, xOff, -1);
  else if (m.format === 'int4') dotInt4(sums, m, r, x, xOff, -1);
  else dotMxfp4(sums, m, r, x, xOff, -1);
  return sums[0]!;
}

/** Stacked row r of `w` . x[xOff..), as float32 (a product's output before its epilogue). */
export function rowDot(w: Weights, r: number, x: Float32Array, xOff: number): number {
  for (const p of w.parts) {
    if (r < p.rows) return Math.fround(matrixDot(p, r, x, xOff));
    r -= p.rows;
  }
  throw new Error(`row ${r} past the product's rows`);
}
