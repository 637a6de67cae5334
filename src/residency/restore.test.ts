import { test } from 'node:test';
import assert from 'node:assert/strict';
import { planRestore, restoreLowerBound } from './restore.ts';
import { rowMapsEqual, type RowMap } from './rowmap.ts';
import { randomRowMap, rng } from './test-helpers.ts';

/** Applies swaps to a mutable copy, checking each names the experts its rows hold (the stale check). */
function apply(map: RowMap, swaps: ReturnType<typeof planRestore>): RowMap {
  const rows = map.layers_map.map((r) => ({ hot: [...r.hot], cold: [...r.cold] }));
  for (const s of swaps) {
    const r = rows[s.layer]!;
    assert.equal(r.hot[s.hotRow], s.hotExpert);
    assert.equal(r.cold[s.coldRow], s.coldExpert);
    [r.hot[s.hotRow], r.cold[s.coldRow]] = [s.coldExpert, s.hotExpert];
  }
  return { ...map, layers_map: rows };
}

test('restore plans reach the target exactly, in the lower-bound number of swaps', () => {
  const r = rng(7);
  for (let trial = 0; trial < 200; trial++) {
    const experts = 2 + Math.floor(r() * 40);
    const hot = 1 + Math.floor(r() * (experts - 1));
    const from = randomRowMap(r, 3, experts, hot);
    const to = randomRowMap(r, 3, experts, hot);
    const plan = planRestore(from, to, 0);
    assert.ok(rowMapsEqual(apply(from, plan), to));
    assert.equal(plan.length, restoreLowerBound(from, to));
    assert.equal(planRestore(to, to, 0).length, 0);
  }
});

test('the bound is the true minimum (breadth-first search over every arrangement of 6 experts, 2 or 3 hot)', () => {
  for (const hot of [2, 3]) {
    const n = 6;
    const key = (p: number[]) => p.join(',');
    // Distance from the identity arrangement to every arrangement, moving only hot<->cold.
    const dist = new Map<string, number>([[key([0, 1, 2, 3, 4, 5]), 0]]);
    let frontier = [[0, 1, 2, 3, 4, 5]];
    while (frontier.length) {
      const next: number[][] = [];
      for (const p of frontier) {
        for (let h = 0; h < hot; h++) for (let c = hot; c < n; c++) {
          const q = [...p];
          [q[h], q[c]] = [q[c]!, q[h]!];
          if (!dist.has(key(q))) { dist.set(key(q), dist.get(key(p))! + 1); next.push(q); }
        }
      }
      frontier = next;
    }
    assert.equal(dist.size, 720);
    for (const [k, d] of dist) {
      const ids = k.split(',').map(Number);
      const from: RowMap = { version: 1, model: 't', layers: 1, experts: n, hot_per_layer: hot, layers_map: [{ hot: ids.slice(0, hot), cold: ids.slice(hot) }] };
      const to: RowMap = { ...from, layers_map: [{ hot: [0, 1, 2, 3, 4, 5].slice(0, hot), cold: [0, 1, 2, 3, 4, 5].slice(hot) }] };
      assert.equal(planRestore(from, to, 0).length, d, `arrangement ${k}`);
    }
  }
});
