// Budgets are applied to the live controller, so a value that breaks the EWMA must be refused, and the
// EWMA itself must stay finite for any half-life it can be given.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Controller } from './controller.ts';
import { parseCountsDump } from './counts.ts';
import { foldWindow } from './policy.ts';
import { identityRowMap } from './rowmap.ts';

test('the repro: half_life_tokens 1e17 is refused naming the field, and the controller stays as it was', () => {
  const ctl = new Controller({ boot: identityRowMap('t', 2, 8, 6), frozen: false });
  const before = ctl.budgets;
  const r = ctl.control({ budgets: { half_life_tokens: 1e17 } });
  assert.ok(!r.ok && /budgets\.half_life_tokens/.test(r.error), JSON.stringify(r));
  assert.equal(ctl.budgets, before);
});

test('every budget has a sane finite range: far past useful values are refused, the edges are accepted', () => {
  const ctl = new Controller({ boot: identityRowMap('t', 2, 8, 6) });
  const refused: Record<string, number>[] = [
    { drain_every: 0 }, { drain_every: 1e7 }, { half_life_tokens: 0.5 }, { half_life_tokens: 1e10 }, { hysteresis: 0.99 },
    { hysteresis: 1e4 }, { min_average: -1 }, { min_average: 1e10 }, { swaps_per_layer_per_drain: 1e6 },
    { swaps_per_step: 1e6 }, { swaps_per_step: 1.5 }, { count_tmax: 1e8 }, { prior_picks_per_expert: 1e7 }, { move_cost_picks: -1 }, { move_cost_picks: 1e10 },
  ];
  for (const b of refused) {
    const r = ctl.control({ budgets: b });
    const field = Object.keys(b)[0]!;
    assert.ok(!r.ok && r.error.includes(`budgets.${field}`), `${JSON.stringify(b)}: ${JSON.stringify(r)}`);
  }
  assert.throws(() => new Controller({ boot: identityRowMap('t', 2, 8, 6), budgets: { half_life_tokens: 1e17 } }), /budgets\.half_life_tokens/);
  assert.ok(ctl.control({ budgets: { half_life_tokens: 1e9, drain_every: 1_000_000, hysteresis: 1000, swaps_per_step: 0 } }).ok);
});

test('foldWindow stays finite for any positive half-life (it was 0/0 = NaN past ~1e16 steps)', () => {
  for (const h of [1, 500, 1e9, 1e17, 1e300, Infinity]) {
    const state = new Float64Array([5, 0]);
    foldWindow(state, [64, 0], 64, h);
    assert.ok(state.every(Number.isFinite), `h=${h}: ${state}`);
    if (h >= 1e9) assert.ok(Math.abs(state[0]! - 69) < 1e-3, `h=${h}: a very long half-life keeps the old count and adds the window's: ${state[0]}`);
  }
});

test('the longest accepted half-life drains to finite counts and a dump that parses', () => {
  const ctl = new Controller({ boot: identityRowMap('t', 2, 8, 6), frozen: false, budgets: { drain_every: 4, half_life_tokens: 1e9, min_average: 1 } });
  const counter = new Uint32Array(16);
  for (let step = 0; step < 64; step++) {
    counter[7] = counter[7]! + 2;
    counter[15] = counter[15]! + 1;
    ctl.tick({ step, tokens: 1, counted: true }, () => counter.slice());
  }
  const dump = ctl.dumpCounts();
  assert.ok(dump.decayed.flat().every(Number.isFinite), JSON.stringify(dump.decayed));
  assert.doesNotThrow(() => parseCountsDump(JSON.parse(JSON.stringify(dump))));
  assert.ok(ctl.stats.decided > 0 && ctl.stats.decided <= 4, `swaps decided on real counts, not NaN: ${ctl.stats.decided}`);
});

test('half_life_steps, the name before the EWMA aged per token, is refused with the new name, and nothing changes', () => {
  const ctl = new Controller({ boot: identityRowMap('t', 2, 8, 6), frozen: false });
  const before = ctl.budgets;
  const r = ctl.control({ budgets: { half_life_steps: 250, drain_every: 4 } } as never);
  assert.ok(!r.ok && /budgets\.half_life_steps: renamed half_life_tokens/.test(r.error), JSON.stringify(r));
  assert.equal(ctl.budgets, before);
  assert.throws(() => new Controller({ boot: identityRowMap('t', 2, 8, 6), budgets: { half_life_steps: 250 } as never }), /budgets\.half_life_steps: renamed half_life_tokens/);
});
