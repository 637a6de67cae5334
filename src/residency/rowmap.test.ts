import { test } from 'node:test';
import assert from 'node:assert/strict';
import { diffRowMaps, identityRowMap, parseRowMap, rowMapProblem, serializeRowMap, slotTable, rowMapsEqual } from './rowmap.ts';
import { randomRowMap, rng } from './test-helpers.ts';

const good = () => JSON.parse(serializeRowMap(identityRowMap('tiny', 4, 64, 49)));

test('serialize -> parse round-trips a random map', () => {
  const m = randomRowMap(rng(1), 4, 64, 49);
  assert.ok(rowMapsEqual(parseRowMap(JSON.parse(serializeRowMap(m))), m));
});

test('parse errors name the field and what was expected', () => {
  const cases: [(j: any) => void, RegExp][] = [
    [(j) => { j.layers_map[3].hot[7] = 70; }, /layers_map\[3\]\.hot\[7\]: expert 70 out of range 0\.\.63/],
    [(j) => { j.layers_map[1].cold[0] = 0; }, /layers_map\[1\]\.cold\[0\]: expert 0 appears twice in layer 1/],
    [(j) => { j.layers_map[2].hot.pop(); }, /layers_map\[2\]\.hot: 48 rows, expected 49/],
    [(j) => { j.layers_map.pop(); }, /layers_map: 3 layers, expected 4/],
    [(j) => { j.version = 2; }, /^map: version: /],
    [(j) => { j.extra = true; }, /\(root\): .*extra/],
    [(j) => { j.layers_map[0].hot[0] = 1.5; }, /layers_map\[0\]\.hot\[0\]: /],
    [(j) => { j.hot_per_layer = 64; }, /hot_per_layer: 64 leaves no cold row/],
  ];
  for (const [mutate, re] of cases) {
    const j = good();
    mutate(j);
    assert.throws(() => parseRowMap(j), (e: any) => e.code === 'BAD_MAP' && re.test(e.message), String(re));
  }
});

test('diff lists promoted/demoted experts per changed layer; slots invert the map', () => {
  const a = identityRowMap('m', 2, 8, 5);
  const b = { ...a, layers_map: [a.layers_map[0]!, { hot: [0, 1, 7, 3, 4], cold: [5, 6, 2] }] };
  assert.equal(rowMapProblem(b), null);
  assert.deepEqual(diffRowMaps(a, b), [{ layer: 1, promoted: [7], demoted: [2], rowsChanged: 2 }]);
  const s = slotTable(b);
  assert.equal(s[8 + 7], 2);
  assert.equal(s[8 + 2], 5 + 2);
});
