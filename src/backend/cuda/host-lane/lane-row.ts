// The host expert lane's view of an expert's bank row (device-weights.ts's ExpertRowLayout): where its gate, up and
// down matrices, their scales and biases sit, and how its units are activated, as the GPU's gemv reads them
// (product.cuh GemmProblem); host_experts.c's HeRow is this, as koffi passes it.
import { ResidencyError } from '../../../errors.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import type { ExpertRowLayout } from '../weights/device-weights.ts';
import type { Fp8Grid } from '../weights/fp8-grid.ts';

/**
 * A block-FP8 matrix's scale grid in a bank row (fp8-grid.ts): its first scale row at byte `at`; weight row r, value k
 * scaled by grid[floor(r / rows) * ld + floor(k / cols)] (cols a multiple of 16).
 */
export interface LaneGrid {
  readonly at: number;
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
}

/** One number for each of an expert's three matrices. */
export interface PerMatrix<T> {
  readonly gate: T;
  readonly up: T;
  readonly down: T;
}

/**
 * Where an expert's matrices sit in its bank row: gate [I][H], up [I][H] and down [H][I] at these byte offsets, bf16
 * values; with `scales`, float8_e4m3fn bytes and each matrix's scale grid (block FP8); with `e8m0`, MXFP4 values (two
 * E2M1 codes a byte, low nibble first) and each matrix's E8M0 scale bytes at these offsets, one a 32 values (K / 32 a
 * weight row, row r's at offset + r x step x K / 32).
 */
export interface LaneRow {
  readonly gate: number;
  readonly up: number;
  readonly down: number;
  /**
   * Gate and up unit j are the rows j x step of their matrices (from `gate`, from `up`): 2 where gate | up rows are
   * interleaved (gpt-oss's gate_up_proj: up one row after gate); absent 1.
   */
  readonly step?: number;
  readonly scales?: PerMatrix<LaneGrid>;
  readonly e8m0?: PerMatrix<number>;
  /** bf16 biases, one a weight row (gate and up row j's at offset + 2 x j x step), added to each sum (gpt-oss). */
  readonly bias?: PerMatrix<number>;
  /** gpt-oss's clamped SwiGLU (product.cuh swiglu_act with limit > 0); absent: silu(gate) x up. */
  readonly clamp?: { readonly limit: number; readonly alpha: number };
}

/** host_experts.c's HE_* formats. */
const FORMAT = { bf16: 0, fp8: 1, mxfp4: 2 } as const;

/** A LaneRow's value format. */
export function laneFormat(r: LaneRow): keyof typeof FORMAT {
  return r.e8m0 ? 'mxfp4' : r.scales ? 'fp8' : 'bf16';
}

/** The lane's view of the banks' expert row (expertRowLayout's) for a model of this hidden and expert size. */
export function laneRow(row: ExpertRowLayout, spec: Pick<ModelSpec, 'hiddenSize' | 'expertIntermediate' | 'expertAct'>): LaneRow {
  const { hiddenSize: H, expertIntermediate: I } = spec;
  const bytesPerValue = { bf16: 2, fp8: 1, mxfp4: 0.5 }[row.format as string];
  if (bytesPerValue === undefined) throw new ResidencyError('INTERNAL', `host experts: no lane layout for ${row.format} experts`);
  const gateUpRow = H * bytesPerValue;
  // Gate | up is one product on the GPU: up's rows follow gate's (I rows in), or interleave with them (one row in).
  const upRows = row.interleaved ? 1 : I;
  const base = {
    gate: row.gateUpAt, up: row.gateUpAt + upRows * gateUpRow, down: row.downAt,
    ...(row.interleaved ? { step: 2 } : {}),
    ...(laneBias(row, upRows)),
    ...(spec.expertAct ? { clamp: { limit: spec.expertAct.limit, alpha: spec.expertAct.alpha } } : {}),
  };
  if (row.format === 'bf16') return base;
  const gu = row.gateUp.grid, dn = row.down.grid;
  if (!gu || !dn) throw new ResidencyError('INTERNAL', `host experts: the ${row.format} expert row has no scale grid`);
  if (row.format === 'mxfp4') return { ...base, e8m0: { gate: row.gateUpGridAt, up: row.gateUpGridAt + upRows * gu.sLd, down: row.downGridAt } };
  // Block FP8: the scale rows of gate | up's one grid are sRows weight rows each; sRows divides I (fp8Grid takes it
  // from the boundaries), so up row j's scale row is I / sRows + floor(j / sRows).
  if (row.interleaved) throw new ResidencyError('INTERNAL', 'host experts: block-FP8 gate | up rows interleaved in one grid');
  if (I % gu.sRows) throw new ResidencyError('INTERNAL', `host experts: gate | up scale rows of ${gu.sRows} weight rows do not divide the expert size ${I}`);
  const grid = (g: Fp8Grid, at: number): LaneGrid => ({ at, rows: g.sRows, cols: g.sCols, ld: g.sLd });
  return { ...base, scales: { gate: grid(gu, row.gateUpGridAt), up: grid(gu, row.gateUpGridAt + 4 * (I / gu.sRows) * gu.sLd), down: grid(dn, row.downGridAt) } };
}

/** The row's biases (gate | up's and down's, both or neither), up's from its first row. */
function laneBias(row: ExpertRowLayout, upRows: number): { bias?: PerMatrix<number> } {
  if (row.gateUpBiasAt < 0 && row.downBiasAt < 0) return {};
  if (row.gateUpBiasAt < 0 || row.downBiasAt < 0) throw new ResidencyError('INTERNAL', 'host experts: an expert row with a gate | up bias but no down bias, or the reverse');
  return { bias: { gate: row.gateUpBiasAt, up: row.gateUpBiasAt + 2 * upRows, down: row.downBiasAt } };
}

/**
 * Why the lane cannot compute this model's expert rows (null: it can): bf16, block-FP8 (e4m3 values, a float32 scale a
 * block at least 16 values wide) or MXFP4 rows (E2M1 values, an E8M0 scale a 32), with or without bf16 biases and
 * gpt-oss's clamped SwiGLU; sizes whole 16-byte loads of the gemv (8 bf16 values, 16 FP8, 32 MXFP4).
 */
export function laneRowRefusal(spec: ModelSpec, row: ExpertRowLayout): string | null {
  const format = row.format as string;
  if (format !== 'bf16' && format !== 'fp8' && format !== 'mxfp4') return `its experts are ${format} (the lane computes bf16, block-FP8 and MXFP4 experts)`;
  if (format === 'fp8' && row.interleaved) return 'its block-FP8 gate and up rows are interleaved (one scale grid: the lane takes them one after the other)';
  if ((row.gateUpBiasAt < 0) !== (row.downBiasAt < 0)) return 'only one of its gate | up and down products has biases';
  const unit = { bf16: 8, fp8: 16, mxfp4: 32 }[format];
  if (spec.hiddenSize % unit || spec.expertIntermediate % unit) return `its hidden size ${spec.hiddenSize} or expert size ${spec.expertIntermediate} is not a multiple of ${unit} (a 16-byte load of ${format} values)`;
  const grids = [row.gateUp.grid, row.down.grid];
  if (format === 'fp8' && grids.some((g) => !g || g.sCols % 16)) return 'its FP8 scale blocks are not a multiple of 16 values wide';
  if (format === 'mxfp4' && grids.some((g, i) => !g || g.sRows !== 1 || g.sCols !== 32 || g.sLd !== (i ? spec.expertIntermediate : spec.hiddenSize) / 32)) {
    return 'its MXFP4 scales are not one E8M0 byte a 32 values of each weight row';
  }
  return null;
}

/** host_experts.c's HeRow for a LaneRow of an expert of hidden H and size I, as koffi passes it. */
export function heRow(r: LaneRow, H: number, I: number): Record<string, unknown> {
  const step = r.step ?? 1;
  const m = (which: keyof PerMatrix<number>, K: number) => {
    const g = r.scales?.[which], e = r.e8m0?.[which];
    const scales = g ? { s: g.at, s_rows: g.rows, s_cols: g.cols, s_ld: g.ld } : e !== undefined ? { s: e, s_rows: 1, s_cols: 32, s_ld: K / 32 } : { s: 0, s_rows: 0, s_cols: 0, s_ld: 0 };
    return { w: r[which], ...scales, b: r.bias?.[which] ?? -1, step: which === 'down' ? 1 : step };
  };
  return {
    format: FORMAT[laneFormat(r)], pad: 0, limit: r.clamp ? Math.fround(r.clamp.limit) : 0, alpha: r.clamp ? Math.fround(r.clamp.alpha) : 0,
    gate: m('gate', H), up: m('up', H), down: m('down', I),
  };
}

/** koffi's declaration of HeMatrix and HeRow (host_experts.c). */
export const HE_MATRIX_FIELDS = { w: 'int64_t', s: 'int64_t', b: 'int64_t', s_rows: 'int32_t', s_cols: 'int32_t', s_ld: 'int32_t', step: 'int32_t' } as const;
export const HE_ROW_FIELDS = (matrix: unknown) => ({ format: 'int32_t', pad: 'int32_t', limit: 'float', alpha: 'float', gate: matrix, up: matrix, down: matrix });
