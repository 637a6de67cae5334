// Block-FP8 scales as the kernels read them: one grid per product, weight row r and value k
// scaled by grid[(r / sRows) * sLd + k / sCols]. A product may stack matrices (gate | up, q | k | v), each
// with its own [ceil(rows / br)][ceil(cols / bc)] scales; the grid's scale rows cover sRows weight rows,
// the largest count dividing the block rows and every boundary between the stacked matrices, so each scale
// row lies inside one block of one matrix. With [128, 128] blocks and boundaries at multiples of 128 (every
// real checkpoint's shapes) the grid is the stored scales, concatenated.
import { ResidencyError } from '../../../errors.ts';

export interface Fp8Grid {
  /** Weight rows a scale row covers. */
  readonly sRows: number;
  /** Values of K a scale covers (the block's columns). */
  readonly sCols: number;
  /** Scales a scale row holds: ceil(cols / sCols). */
  readonly sLd: number;
  /** Scale rows: ceil(total rows / sRows). */
  readonly rows: number;
  /** Bytes of the grid (float32). */
  readonly bytes: number;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/** The grid of a product stacking matrices of `partRows` rows each, `cols` values a row, in `block` blocks. */
export function fp8Grid(partRows: readonly number[], cols: number, block: readonly [number, number]): Fp8Grid {
  const [br, bc] = block;
  let sRows = br;
  let at = 0;
  for (const r of partRows.slice(0, -1)) sRows = gcd(sRows, (at += r));
  const total = partRows.reduce((a, b) => a + b, 0);
  const sLd = Math.ceil(cols / bc);
  const rows = Math.ceil(total / sRows);
  return { sRows, sCols: bc, sLd, rows, bytes: 4 * rows * sLd };
}

/** The grid's values from each stacked matrix's stored scales ([ceil(rows_p / br)][sLd] each). */
export function fillFp8Grid(g: Fp8Grid, partRows: readonly number[], br: number, parts: readonly Float32Array[]): Float32Array {
  if (parts.length !== partRows.length) throw new ResidencyError('INTERNAL', `fp8 grid: ${parts.length} scale tensors for ${partRows.length} matrices`);
  const out = new Float32Array(g.rows * g.sLd);
  let p = 0, off = 0;
  for (let j = 0; j < g.rows; j++) {
    const r = j * g.sRows;
    while (r >= off + partRows[p]!) off += partRows[p++]!;
    const src = Math.floor((r - off) / br) * g.sLd;
    out.set(parts[p]!.subarray(src, src + g.sLd), j * g.sLd);
  }
  return out;
}
