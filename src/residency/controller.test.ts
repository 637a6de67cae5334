import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Controller } from './controller.ts';
import { Counter } from './counts.ts';
import { foldWindow, type Budgets } from './policy.ts';
import { identityRowMap, rowMapProblem, rowMapsEqual } from './rowmap.ts';
import { randInt, rng, shuffle, skewedRouting } from './test-helpers.ts';

const L = 4;
const E = 32;
const H = 24;
const K = 4;

/** A fake bank layout (expert per row) that only changes through the exchange callback, like real banks. */
function fakeBanks(ctl: Controller) {
  const rows = ctl.map().layers_map.map((r) => ({ hot: [...r.hot], cold: [...r.cold] }));
  const exchange = (s: { layer: number; hotRow: number; coldRow: number }) => {
    const r = rows[s.layer]!;
    [r.hot[s.hotRow], r.cold[s.coldRow]] = [r.cold[s.coldRow]!, r.hot[s.hotRow]!];
  };
  return { rows, exchange };
}

function domains(r: () => number, n: number) {
  return Array.from({ length: n }, () => Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i))));
}

/** Drives one controller with seeded traffic, shifting domain every `shiftEvery` steps; checks invariants each step. */
function drive(ctl: Controller, counter: Counter, r: () => number, steps: number, shiftEvery: number, startStep = 0,
  onTick?: (step: number) => void) {
  const doms = domains(r, 3);
  const banks = fakeBanks(ctl);
  let decided = 0;
  for (let step = startStep; step < startStep + steps; step++) {
    onTick?.(step);
    const tokens = r() < 0.05 ? randInt(r, 257, 400) : randInt(r, 1, 4); // occasional prefill-sized step
    const counted = ctl.shouldCount(tokens);
    if (counted) counter.addPicks(skewedRouting(r, tokens, L, E, K, doms[Math.floor(step / shiftEvery) % 3]!), tokens, ctl.budgets.count_tmax);
    const b: Budgets = ctl.budgets;
    const rep = ctl.tick({ step, tokens, counted }, () => counter.snapshot(), banks.exchange);
    assert.ok(rep.applied.length <= b.swaps_per_step, 'per-step budget');
    if (rep.drain) {
      decided += rep.drain.decided.length;
      for (let l = 0; l < L; l++) {
        const mine = rep.drain.decided.filter((s) => s.layer === l);
        assert.ok(mine.length <= b.swaps_per_layer_per_drain, 'per-layer-per-drain budget');
        for (const s of mine) {
          const c = ctl.decayedCount(l, s.coldExpert);
          assert.ok(c >= b.min_average && c >= b.hysteresis * ctl.decayedCount(l, s.hotExpert), 'hysteresis and minimum');
        }
      }
      if (ctl.frozen) assert.equal(rep.drain.decided.length, 0);
    }
    const map = ctl.map();
    assert.equal(rowMapProblem(map), null, 'map stays a partition with constant geometry');
    assert.deepEqual(map.layers_map, banks.rows, 'banks and controller map move in lockstep');
  }
  return { decided, banks };
}

test('property: random traffic and budgets keep the map a partition and every budget', () => {
  for (let seed = 1; seed <= 12; seed++) {
    const r = rng(seed);
    const budgets: Partial<Budgets> = {
      drain_every: randInt(r, 1, 40), half_life_tokens: randInt(r, 12, 1000), hysteresis: 1 + r() * 2,
      min_average: r() * 10, swaps_per_layer_per_drain: randInt(r, 1, 5), swaps_per_step: randInt(r, 0, 6),
      count_tmax: randInt(r, 1, 300),
    };
    const ctl = new Controller({ boot: identityRowMap('t', L, E, H), budgets, frozen: false });
    const counter = new Counter(L, E, K);
    const { decided } = drive(ctl, counter, r, 1500, 300, 0, (step) => {
      // Budgets change mid-run through the control API, as an operator would.
      if (step % 500 === 499) assert.ok(ctl.control({ budgets: { swaps_per_step: randInt(r, 1, 8), drain_every: randInt(r, 1, 50) } }).ok);
    });
    assert.ok(decided > 0, `seed ${seed}: the shifts should cause swaps`);
    assert.equal(ctl.stats.refused, 0, 'queued swaps never conflict with each other');
  }
});

test('a swap whose row moved after the decision is refused, counted, and leaves the map a partition', () => {
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), frozen: false, budgets: { drain_every: 8, min_average: 1 } });
  const counter = new Counter(L, E, K);
  // Traffic only on cold experts of layer 0, so the first drain decides swaps there.
  const routing = new Uint8Array(L * K);
  for (let l = 0; l < L; l++) for (let k = 0; k < K; k++) routing[l * K + k] = H + k;
  for (let step = 0; step < 8; step++) { counter.addPicks(routing, 1); ctl.onStep({ step, tokens: 1, counted: true }); }
  const d = ctl.drain(7, counter.snapshot());
  assert.equal(d.decided.length, 2 * L);
  const victim = d.decided[0]!;
  ctl.exchangeRows(victim.layer, victim.hotRow, E - H - 1); // a cold row no decision named // the decided hot row now holds another expert
  const rep = ctl.applySwaps(100);
  assert.equal(rep.refused.length, 1);
  assert.deepEqual(rep.refused[0], victim);
  assert.equal(rep.applied.length, 2 * L - 1);
  assert.equal(ctl.stats.refused, 1);
  assert.equal(rowMapProblem(ctl.map()), null);
  ctl.onStep({ step: 8, tokens: 1, counted: false });
  assert.equal(ctl.drain(8, counter.snapshot()).refused, 1, 'the drain report carries the refusal');
});

test('freeze stops swaps but not counting; counting off stops counts', () => {
  const r = rng(3);
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), budgets: { drain_every: 16 } }); // boots frozen
  const counter = new Counter(L, E, K);
  drive(ctl, counter, r, 600, 200);
  assert.equal(ctl.stats.decided, 0);
  assert.equal(ctl.stats.applied, 0);
  assert.ok(rowMapsEqual(ctl.map(), ctl.boot));
  const dump = ctl.dumpCounts();
  const total = dump.cumulative.flat().reduce((a, b) => a + b, 0);
  assert.ok(total > 0 && dump.decayed.flat().some((x) => x > 0), 'frozen still counts');
  assert.ok(ctl.control({ counting: false }).ok);
  assert.equal(ctl.shouldCount(1), false);
  const sum = (a: Uint32Array) => a.reduce((x, y) => x + y, 0);
  const counted = sum(counter.snapshot());
  const steps = ctl.dumpCounts().decode_steps;
  drive(ctl, counter, r, 300, 100, 600);
  assert.equal(sum(counter.snapshot()), counted, 'counting off: no new picks');
  assert.equal(ctl.dumpCounts().decode_steps, steps);
});

test('freeze cancels queued adaptive swaps', () => {
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), frozen: false, budgets: { drain_every: 4, min_average: 1, swaps_per_step: 0 } });
  const counter = new Counter(L, E, K);
  drive(ctl, counter, rng(4), 200, 50);
  assert.ok(ctl.queueDepth > 0);
  const q = ctl.queueDepth;
  const res = ctl.control({ freeze: true });
  assert.ok(res.ok);
  assert.equal(ctl.queueDepth, 0);
  assert.equal(ctl.stats.cancelled, q);
});

test('restore returns the boot map exactly, within the per-step budget, after thousands of swaps', () => {
  const r = rng(5);
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), frozen: false, budgets: { drain_every: 2, half_life_tokens: 20, min_average: 0.5, hysteresis: 1.05, swaps_per_layer_per_drain: 4 } });
  const counter = new Counter(L, E, K);
  drive(ctl, counter, r, 3000, 60);
  assert.ok(ctl.stats.applied >= 1000, `applied ${ctl.stats.applied}`);
  assert.ok(!rowMapsEqual(ctl.map(), ctl.boot));
  const res = ctl.control({ restore_map: true });
  assert.ok(res.ok && res.changes[0]!.includes('restore swaps queued'), JSON.stringify(res));
  assert.equal(ctl.frozen, true);
  const { banks } = drive(ctl, counter, r, 200, 60, 3000); // restore swaps flow through the same queue and budget
  assert.equal(ctl.queueDepth, 0);
  assert.ok(rowMapsEqual(ctl.map(), ctl.boot));
  assert.deepEqual(banks.rows, ctl.boot.layers_map);
});

test('a rejected control command names the field and changes nothing', () => {
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), frozen: false, budgets: { swaps_per_step: 0, drain_every: 4, min_average: 1 } });
  const counter = new Counter(L, E, K);
  drive(ctl, counter, rng(6), 100, 50);
  const state = () => JSON.stringify({ b: ctl.budgets, f: ctl.frozen, c: ctl.counting, q: ctl.pending(), d: ctl.dumpCounts(), m: ctl.map(), s: ctl.stats });
  const before = state();
  const bad: [unknown, RegExp][] = [
    [{ freeze: 'yes' }, /^freeze: /],
    [{ frezee: true }, /frezee/],
    [{ budgets: { hysteresis: 0.5 } }, /^budgets\.hysteresis: /],
    [{ budgets: { drain_every: 0 } }, /^budgets\.drain_every: /],
    [{ budgets: { swaps_per_step: 1.5 } }, /^budgets\.swaps_per_step: /],
    [{ budgets: { drain_evry: 3 } }, /drain_evry/],
    [{ dump_counts: '' }, /^dump_counts: /],
    [{ restore_map: true, freeze: false }, /^restore_map: /],
    [{ baseline: true, budgets: { count_tmax: -1 } }, /^budgets\.count_tmax: /],
    [[1], /\(root\)/],
  ];
  for (const [cmd, re] of bad) {
    const res = ctl.control(cmd as never);
    assert.equal(res.ok, false, JSON.stringify(cmd));
    assert.match((res as { error: string }).error, re);
    assert.equal(state(), before, `${JSON.stringify(cmd)} changed state`);
  }
});

test('baseline resets the EWMA; dump_counts returns the dump with the path', () => {
  const ctl = new Controller({ boot: identityRowMap('t', L, E, H), budgets: { drain_every: 8 } });
  const counter = new Counter(L, E, K);
  drive(ctl, counter, rng(8), 100, 50);
  const res = ctl.control({ dump_counts: '/tmp/x.json', baseline: true, freeze: false }, counter.snapshot());
  assert.ok(res.ok && res.dump);
  assert.equal(res.dump.path, '/tmp/x.json');
  assert.ok(res.dump.counts.decayed.flat().some((x) => x > 0), 'the dump is taken before the baseline');
  assert.ok(ctl.dumpCounts().decayed.flat().every((x) => x === 0));
  assert.equal(ctl.frozen, false);
});

test('EWMA: a constant rate converges to rate / (1 - 2^(-1/h)) whatever the drain interval', () => {
  const h = 50;
  for (const every of [1, 7, 64]) {
    const state = new Float64Array(1);
    for (let s = 0; s < 5000; s += every) foldWindow(state, [3 * every], every, h); // 3 picks per step
    assert.ok(Math.abs(state[0]! - 3 / (1 - Math.pow(0.5, 1 / h))) < 1e-6, `every ${every}: ${state[0]}`);
  }
});

test('the EWMA ages by counted tokens: one 4-user step ages it as four 1-user steps, a prefill step not at all', () => {
  const budgets = { drain_every: 8, half_life_tokens: 40, count_tmax: 16 };
  const run = (steps: readonly { tokens: number; picks: number }[]) => {
    const ctl = new Controller({ boot: identityRowMap('t', 1, 4, 2), budgets });
    const counter = new Uint32Array(4);
    steps.forEach((s, step) => {
      const counted = ctl.shouldCount(s.tokens);
      if (counted) counter[3] = counter[3]! + s.picks;
      ctl.onStep({ step, tokens: s.tokens, counted });
      if (ctl.drainDue()) ctl.drain(step, counter.slice());
    });
    return ctl.decayedCount(0, 3);
  };
  // 32 tokens, 2 picks each, then 96 tokens with no picks: as 1-user steps, as 4-user steps, and as 4-user steps with a
  // prefill step (100 tokens, not counted) in every drain window.
  const one = run([...Array(32).fill({ tokens: 1, picks: 2 }), ...Array(96).fill({ tokens: 1, picks: 0 })]);
  const four = run([...Array(8).fill({ tokens: 4, picks: 8 }), ...Array(24).fill({ tokens: 4, picks: 0 })]);
  const withPrefill = run(Array.from({ length: 32 }, (_, i) => i % 8 === 0 ? [{ tokens: 100, picks: 0 }] : [])
    .flatMap((p, i) => [...p, { tokens: 4, picks: i < 8 ? 8 : 0 }]));
  assert.ok(one > 0 && Math.abs(four - one) < 1e-9 * one, `4-user steps ${four} vs 1-user steps ${one}`);
  const expected = 64 * Math.pow(0.5, 96 / 40); // all 64 picks age ~96 tokens (the fold spreads each window's evenly)
  assert.ok(Math.abs(one / expected - 1) < 0.25, `${one} ~ ${expected}`);
  // With prefill steps in the windows the drains fall on other tokens (the last 4 decode steps are not drained yet), so
  // the ages differ a little; the prefills' 400 tokens, had they aged the counts, would take them below 1/500 of this.
  assert.ok(withPrefill > 0.5 * four && withPrefill < 2 * four, `prefill steps age nothing: ${withPrefill} vs ${four}`);
});
