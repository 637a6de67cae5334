// The one interface every residency policy fills in the simulator: ours (adaptive) and the peers'.
import type { RowMap } from '../../residency/rowmap.ts';
import type { SimStep } from '../traffic.ts';

export interface Geometry {
  readonly layers: number;
  readonly experts: number;
  /** Hot-bank rows per layer (H); fixed for the whole run. */
  readonly hotPerLayer: number;
  readonly topK: number;
}

/** What a policy did between one step and the next. */
export interface Moves {
  /** Hot<->cold exchanges applied (between-step residency moves). */
  readonly swaps: number;
  /** Copy-on-miss inserts (a missed expert copied into the hot bank, evicting one). */
  readonly copies: number;
  /** Swaps planned but refused (stale against the map) or dropped. */
  readonly refused: number;
}

export const NO_MOVES: Moves = Object.freeze({ swaps: 0, copies: 0, refused: 0 });

/**
 * A residency policy as the simulator drives it.
 *
 * Guarantees (checked by policy.case.test.ts for every policy):
 * - `hot` always holds exactly `hotPerLayer` ones per layer (the map stays a partition, geometry fixed);
 * - `hot` only changes inside `afterStep`, and the number of experts entering the hot bank there equals
 *   swaps + copies and never exceeds `movesPerStep`;
 * - the same inputs give the same sequence of hot sets (no hidden randomness, no clocks).
 */
export interface Policy {
  readonly name: string;
  readonly geometry: Geometry;
  /** [layers * experts], 1 where the expert is in the hot bank for the next step. Read-only to callers. */
  readonly hot: Uint8Array;
  /** Most experts that may enter the hot bank in one afterStep (Infinity for the unbudgeted oracle). */
  readonly movesPerStep: number;
  /** Step `step.index` ran with these picks against the current `hot`; update and move experts now. */
  afterStep(step: SimStep): Moves;
}

/** What a policy is built from. `steps` is the whole stream: only the hindsight oracle may look ahead. */
export interface PolicyContext {
  readonly geometry: Geometry;
  /** The map the run boots with (fitted or given); every policy starts from it. */
  readonly bootMap: RowMap;
  readonly steps: readonly SimStep[];
}

export type PolicyFactory = (ctx: PolicyContext) => Policy;

/** Hot mask from a map. */
export function hotMaskOf(map: RowMap): Uint8Array {
  const mask = new Uint8Array(map.layers * map.experts);
  map.layers_map.forEach((rows, l) => { for (const e of rows.hot) mask[l * map.experts + e] = 1; });
  return mask;
}

/** Per-step pick counts [layers * experts] of one step. */
export function stepCounts(step: SimStep, g: Geometry, into?: Uint32Array): Uint32Array {
  const counts = into ?? new Uint32Array(g.layers * g.experts);
  const row = g.layers * g.topK;
  for (let t = 0; t < step.tokens; t++) {
    for (let l = 0; l < g.layers; l++) {
      const base = t * row + l * g.topK;
      for (let k = 0; k < g.topK; k++) counts[l * g.experts + step.picks[base + k]!]!++;
    }
  }
  return counts;
}
