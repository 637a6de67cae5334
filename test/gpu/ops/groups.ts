// A step's picks grouped by expert as the routing groups them (moe.cuh group_picks: the spec the routing kernels'
// groups are checked against, and the groups the expert products are given): experts ascending, each group's picks
// (t * K + k) in pick order, its expert's bank slot, and for the tensor-core tiles 64 rows of a group a tile.
import { maxGroupedTiles, type GroupArrays } from '../../../src/backend/cuda/step/kernel-args.ts';
import type { OpDevice } from './device.ts';

/** Rows of a tensor-core tile (product.cuh TC_TILE_ROWS). */
export const TILE_ROWS = 64;

export interface Groups {
  readonly n: number;
  readonly expert: number[];
  readonly slot: number[];
  /** [n + 1]: group g's picks are rows[start[g] .. start[g + 1]). */
  readonly start: number[];
  readonly rows: number[];
  readonly tileGroup: number[];
  readonly tileRow0: number[];
}

/** The groups of the picks of rows [0, valid) (picks[t * K + k]: an expert). */
export function groupsOf(picks: ArrayLike<number>, valid: number, K: number, slotOf: (e: number) => number): Groups {
  const by = new Map<number, number[]>();
  for (let p = 0; p < valid * K; p++) {
    const e = picks[p]!;
    if (!by.has(e)) by.set(e, []);
    by.get(e)!.push(p);
  }
  const expert = [...by.keys()].sort((a, b) => a - b);
  const g: Groups = { n: expert.length, expert, slot: [], start: [], rows: [], tileGroup: [], tileRow0: [] };
  expert.forEach((e, i) => {
    const picksOf = by.get(e)!;
    g.slot.push(slotOf(e));
    g.start.push(g.rows.length);
    g.rows.push(...picksOf);
    for (let r0 = 0; r0 < picksOf.length; r0 += TILE_ROWS) {
      g.tileGroup.push(i);
      g.tileRow0.push(r0);
    }
  });
  g.start.push(g.rows.length);
  return g;
}

/**
 * The groups on the device in the routing's arrays (GroupArrays), sized as the step's workspace sizes them for T rows
 * of K picks among E experts; entries past the groups are poison (-1), as stale entries would be.
 */
export function uploadGroups(dev: OpDevice, g: Groups, T: number, K: number, E: number): GroupArrays {
  const tiles = maxGroupedTiles(T * K, E);
  const arr = (n: number, vals: number[]): Int32Array => {
    const a = new Int32Array(Math.max(n, 1)).fill(-1);
    a.set(vals);
    return a;
  };
  return {
    n: dev.upload(Int32Array.of(g.n), 'grpN'),
    slot: dev.upload(arr(E, g.slot), 'grpSlot'),
    start: dev.upload(arr(E + 1, g.start), 'grpStart'),
    rows: dev.upload(arr(T * K, g.rows), 'grpRows'),
    tileN: dev.upload(Int32Array.of(g.tileGroup.length), 'tileN'),
    tileGroup: dev.upload(arr(tiles, g.tileGroup), 'tileGroup'),
    tileRow0: dev.upload(arr(tiles, g.tileRow0), 'tileRow0'),
  };
}
