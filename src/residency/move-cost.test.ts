// The copy-cost gate of decideSwaps (budgets.move_cost_picks): a swap is kept only when the picks it saves over the
// EWMA's window pay for its copies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_BUDGETS, decideSwaps, type Budgets } from './policy.ts';
import { identityRowMap } from './rowmap.ts';
import { mulberry32 } from '../util/rng.ts';

const pairs = (decayed: number[], b: Partial<Budgets>, hot = 2) =>
  decideSwaps(identityRowMap('t', 1, decayed.length, hot), Float64Array.from(decayed), { ...DEFAULT_BUDGETS, ...b }, 0).map((s) => [s.coldExpert, s.hotExpert]);

test('a pair whose gain (cold minus hot decayed picks) is below move_cost_picks is not moved, at any hysteresis', () => {
  const loose = { hysteresis: 1, min_average: 0 };
  // Hot experts 0, 1; cold 2, 3. The best pair gains 4.5 - 3 = 1.5 picks.
  assert.deepEqual(pairs([3, 10, 4.5, 0], { ...loose, move_cost_picks: 2 }), []);
  assert.deepEqual(pairs([3, 10, 4.5, 0], { ...loose, move_cost_picks: 1.5 }), [[2, 0]]);
  assert.deepEqual(pairs([3, 10, 4.5, 0], { ...loose, move_cost_picks: 0 }), [[2, 0]]);
  // Pairs only get worse down the lists: the first that does not pay ends the layer.
  assert.deepEqual(pairs([1, 2, 9, 3.5], { ...loose, move_cost_picks: 2 }), [[2, 0]]);
  assert.deepEqual(pairs([1, 2, 9, 4], { ...loose, move_cost_picks: 2 }), [[2, 0], [3, 1]]);
});

test('with the default hysteresis and min_average the gate changes no decision (they imply a gain >= 8 / 3 picks)', () => {
  assert.equal(DEFAULT_BUDGETS.move_cost_picks, 2);
  const rand = mulberry32(5);
  for (let i = 0; i < 2000; i++) {
    const decayed = Array.from({ length: 8 }, () => (rand() < 0.3 ? 0 : rand() * 30));
    assert.deepEqual(pairs(decayed, {}, 4), pairs(decayed, { move_cost_picks: 0 }, 4), JSON.stringify(decayed));
  }
});
