// The expert compute of one MoE layer as a list of units (one bank row applied to one or two picks), so
// the units can be shared out between threads: each unit is computed by the same code whichever thread
// runs it, and writes only its own picks' output rows, so any split gives bit-identical results.
import { swigluExpert, swigluExpertPair } from './moe-ops.ts';

/** Ints per unit: bank index, row offset, out offset A, out offset B (-1: single), x offset A, x offset B. */
export const UNIT = 6;

/**
 * Writes the units for `picks` picks ordered by slot (`order`) into `units`; returns their count. Two
 * picks of the same row (adjacent after the split) make one unit sharing a pass over the row's weights.
 * Bank index: layer*2 for the hot bank, layer*2+1 for the cold bank (CpuExpertBanks.bankList order).
 */
export function expertUnits(
  units: Int32Array,
  order: Int32Array,
  ids: Int32Array,
  slots: Int32Array,
  picks: number,
  layer: number,
  hotRows: number,
  rowSize: number,
  topK: number,
  hidden: number,
): number {
  let n = 0;
  for (let i = 0; i < picks; i++) {
    const p = order[i]!;
    const slot = slots[ids[p]!]!;
    const hot = slot < hotRows;
    const u = n * UNIT;
    units[u] = layer * 2 + (hot ? 0 : 1);
    units[u + 1] = (hot ? slot : slot - hotRows) * rowSize;
    units[u + 2] = p * hidden;
    units[u + 4] = ((p / topK) | 0) * hidden;
    const q = i + 1 < picks ? order[i + 1]! : -1;
    if (q >= 0 && slots[ids[q]!] === slot) {
      units[u + 3] = q * hidden;
      units[u + 5] = ((q / topK) | 0) * hidden;
      i++;
    } else {
      units[u + 3] = -1;
      units[u + 5] = -1;
    }
    n++;
  }
  return n;
}

/** Computes units [u0, u1) into `out` ([picks][H]) from the banks. act: scratch of 2*I floats. */
export function computeExpertUnits(
  out: Float32Array,
  units: Int32Array,
  u0: number,
  u1: number,
  banks: readonly Float32Array[],
  x: Float32Array,
  hidden: number,
  inter: number,
  act: Float32Array,
): void {
  for (let n = u0; n < u1; n++) {
    const u = n * UNIT;
    const bank = banks[units[u]!]!;
    const outB = units[u + 3]!;
    if (outB >= 0) swigluExpertPair(out, units[u + 2]!, outB, bank, units[u + 1]!, x, units[u + 4]!, units[u + 5]!, hidden, inter, act);
    else swigluExpert(out, units[u + 2]!, bank, units[u + 1]!, x, units[u + 4]!, hidden, inter, act);
  }
}

