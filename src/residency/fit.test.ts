import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fitMap } from './fit.ts';
import { toRows, type CountsDump } from './counts.ts';
import { diffRowMaps, identityRowMap, rowMapProblem, slotTable, type RowMap } from './rowmap.ts';
import { randomRowMap, rng } from './test-helpers.ts';
import { tinyMoeTrace } from '../../fixtures/fixture-paths.ts';

const L = 6;
const E = 64;
const K = 6;

/** Picks per [layer][expert] in a trace (layout uint8[tokens][6][6], see the fixture README). */
function countTrace(domain: string): Float64Array {
  const bytes = tinyMoeTrace(domain);
  const out = new Float64Array(L * E);
  for (let i = 0; i < bytes.length; i++) out[(Math.floor(i / K) % L) * E + bytes[i]!]! += 1;
  return out;
}

function dumpOf(domains: string[]): CountsDump {
  const total = new Float64Array(L * E);
  for (const d of domains) countTrace(d).forEach((x, i) => { total[i]! += x; });
  const rows = toRows(total, L, E);
  return { version: 1, model: 'tiny-moe', step: 0, decode_steps: 0, half_life: 500, decayed: rows, cumulative: rows };
}

function coldShare(map: RowMap, domains: string[]): number {
  const slots = slotTable(map);
  let cold = 0;
  let all = 0;
  for (const d of domains) {
    countTrace(d).forEach((x, i) => { all += x; if (slots[i]! >= map.hot_per_layer) cold += x; });
  }
  return cold / all;
}

test('fit on en+code traces: top-49 per layer, the README sanity figures (~1.7% / ~9.4% cold)', () => {
  const dump = dumpOf(['en', 'code_js', 'code_py']);
  const map = fitMap(dump, { hot: 49 });
  assert.equal(rowMapProblem(map), null);
  for (let l = 0; l < L; l++) {
    const c = dump.cumulative[l]!;
    const minHot = Math.min(...map.layers_map[l]!.hot.map((e) => c[e]!));
    const maxCold = Math.max(...map.layers_map[l]!.cold.map((e) => c[e]!));
    assert.ok(minHot >= maxCold, `layer ${l}: a cold expert outranks a hot one`);
  }
  const fitted = coldShare(map, ['en', 'code_js', 'code_py']);
  const shifted = coldShare(map, ['de', 'ja']);
  assert.ok(Math.abs(fitted - 0.017) < 0.004, `en+code cold share ${fitted}`);
  assert.ok(Math.abs(shifted - 0.094) < 0.01, `de+ja cold share ${shifted}`);
  assert.ok(coldShare(fitMap(dumpOf(['de', 'ja']), { hot: 49 }), ['de', 'ja']) < 0.03);
});

test('fit keeps rows: staying experts keep their rows, the result is the base plus one exchange per promotion', () => {
  const base = randomRowMap(rng(11), L, E, 49);
  const dump = dumpOf(['ja']);
  const map = fitMap(dump, { base });
  const baseSlots = slotTable(base);
  const slots = slotTable(map);
  for (const d of diffRowMaps(base, map)) {
    assert.equal(d.rowsChanged, 2 * d.promoted.length, `layer ${d.layer}: only the exchanged rows change`);
    for (let e = 0; e < E; e++) {
      if (!d.promoted.includes(e) && !d.demoted.includes(e)) assert.equal(slots[d.layer * E + e], baseSlots[d.layer * E + e]);
    }
  }
  assert.deepEqual(fitMap(dump, { base }), map, 'deterministic');
  // Fitting a map on the counts it was fitted on changes nothing.
  assert.deepEqual(diffRowMaps(map, fitMap(dump, { base: map })), []);
});

test('ties go to the base map, then the lower id; geometry mismatches are refused', () => {
  const zero = Array.from({ length: 2 }, () => new Array(8).fill(0));
  const dump: CountsDump = { version: 1, model: 'm', step: 0, decode_steps: 0, half_life: 500, decayed: zero, cumulative: zero };
  const base: RowMap = { ...identityRowMap('m', 2, 8, 3), layers_map: [{ hot: [7, 5, 6], cold: [0, 1, 2, 3, 4] }, { hot: [0, 1, 2], cold: [3, 4, 5, 6, 7] }] };
  assert.deepEqual(fitMap(dump, { base }).layers_map, base.layers_map, 'all tied: the base stays');
  assert.deepEqual(fitMap(dump, { hot: 3 }).layers_map[0], { hot: [0, 1, 2], cold: [3, 4, 5, 6, 7] }, 'no base: lower ids');
  const c = zero.map((r) => [...r]);
  c[0]![3] = 5;
  const one = fitMap({ ...dump, cumulative: c }, { base });
  assert.deepEqual(one.layers_map[0], { hot: [3, 5, 6], cold: [0, 1, 2, 7, 4] }, 'expert 3 takes the row of 7, the highest id among the tied hot experts');
  assert.throws(() => fitMap(dump, { base, hot: 4 }), /hot_per_layer/);
  assert.throws(() => fitMap(dump, { hot: 8 }), /hot must be/);
});
