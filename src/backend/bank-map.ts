// The residency map a backend's banks hold, and bringing the banks to a map at once: what the residency driver
// boots from and what tests and benchmarks place before they step. Reads and swaps rows through ExpertBanks only.
import { ResidencyError } from '../errors.ts';
import { planRestore } from '../residency/restore.ts';
import { geometry, type RowMap } from '../residency/rowmap.ts';
import type { ExpertBanks } from './backend.ts';

/** The map the banks hold now, read row by row. */
export function mapFromBanks(banks: ExpertBanks, model: string): RowMap {
  const layers_map = Array.from({ length: banks.layers }, (_, l) => ({
    hot: Array.from({ length: banks.hotPerLayer }, (_, r) => banks.expertAt(l, 'hot', r)),
    cold: Array.from({ length: banks.experts - banks.hotPerLayer }, (_, r) => banks.expertAt(l, 'cold', r)),
  }));
  return { version: 1, model, layers: banks.layers, experts: banks.experts, hot_per_layer: banks.hotPerLayer, layers_map };
}

/** Moves the banks to `map` at once (before serving, so no per-step budget); returns the swaps made. */
export function placeMap(banks: ExpertBanks, model: string, map: RowMap): number {
  const now = mapFromBanks(banks, model);
  if (now.layers !== map.layers || now.experts !== map.experts || now.hot_per_layer !== map.hot_per_layer) {
    throw new ResidencyError('BAD_MAP', `map is ${geometry(map)} but the banks are ${geometry(now)}: the geometry is fixed when the banks are built`);
  }
  const plan = planRestore(now, map, 0);
  for (const s of plan) banks.swapRows(s.layer, s.hotRow, s.coldRow);
  return plan.length;
}
