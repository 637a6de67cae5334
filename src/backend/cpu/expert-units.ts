// The expert compute of one MoE layer as a list of units (one bank row and the step's picks of it, up to
// MAX_GROUP), so a row's weights are read once for all the tokens that picked it, and the units can be shared
// out between threads: each pick is computed by the same code whichever thread runs it and writes only its own
// output row, so any grouping and any split give bit-identical results.
import { swigluExpert, swigluExpertPair } from './moe-ops.ts';

/** Ints per unit: bank piece index (CpuExpertBanks.pieces), row offset in it (words), first pick (an index into the unit picks), pick count. */
export const UNIT = 4;
/** Ints per unit pick: its output offset and its input offset (floats). */
export const PICK = 2;
/** Most picks in one unit: bounds each thread's scratch (a busier row makes several units). */
export const MAX_GROUP = 32;

/**
 * Writes the units for `picks` picks ordered by slot (`order`: a row's picks are adjacent after the split) into
 * `units`, and each pick's offsets into `unitPicks` in that order; returns the unit count. `where`: the layer's
 * slot -> [bank piece index, word offset in that piece] (CpuExpertBanks.where), which a unit carries.
 */
export function expertUnits(
  units: Int32Array,
  unitPicks: Int32Array,
  order: Int32Array,
  ids: Int32Array,
  slots: Int32Array,
  where: Int32Array,
  picks: number,
  topK: number,
  hidden: number,
): number {
  let n = 0;
  for (let i = 0; i < picks; n++) {
    const slot = slots[ids[order[i]!]!]!;
    const u = n * UNIT;
    units[u] = where[2 * slot]!;
    units[u + 1] = where[2 * slot + 1]!;
    units[u + 2] = i;
    const first = i;
    while (i < picks && i - first < MAX_GROUP && slots[ids[order[i]!]!] === slot) {
      const p = order[i]!;
      unitPicks[i * PICK] = p * hidden;
      unitPicks[i * PICK + 1] = ((p / topK) | 0) * hidden;
      i++;
    }
    units[u + 3] = i - first;
  }
  return n;
}

/**
 * Calls `f` for unit n's picks two at a time (outB and xB -1 for an odd last one): how the JS loops share a
 * pass over the row's weights between two tokens.
 */
export function unitPairs(units: Int32Array, unitPicks: Int32Array, n: number, f: (outA: number, outB: number, xA: number, xB: number) => void): void {
  const first = units[n * UNIT + 2]!;
  const end = first + units[n * UNIT + 3]!;
  let j = first;
  for (; j + 1 < end; j += 2) f(unitPicks[j * PICK]!, unitPicks[(j + 1) * PICK]!, unitPicks[j * PICK + 1]!, unitPicks[(j + 1) * PICK + 1]!);
  if (j < end) f(unitPicks[j * PICK]!, -1, unitPicks[j * PICK + 1]!, -1);
}

/** Computes units [u0, u1) into `out` ([picks][H]) from the bank pieces (CpuExpertBanks.pieces). act: scratch of 2*I floats. */
export function computeExpertUnits(
  out: Float32Array,
  units: Int32Array,
  unitPicks: Int32Array,
  u0: number,
  u1: number,
  banks: readonly Float32Array[],
  x: Float32Array,
  hidden: number,
  inter: number,
  act: Float32Array,
): void {
  for (let n = u0; n < u1; n++) {
    const bank = banks[units[n * UNIT]!]!;
    const row = units[n * UNIT + 1]!;
    unitPairs(units, unitPicks, n, (outA, outB, xA, xB) => {
      if (outB >= 0) swigluExpertPair(out, outA, outB, bank, row, x, xA, xB, hidden, inter, act);
      else swigluExpert(out, outA, bank, row, x, xA, hidden, inter, act);
    });
  }
}
