// The controller with banks that move in the background: requestSwaps (stale-checked at request), land (the
// map follows), experts in flight never re-decided, chained restore swaps wait for the row they need.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Controller } from './controller.ts';
import { identityRowMap, rowMapsEqual } from './rowmap.ts';
import type { Swap } from './policy.ts';

const L = 2, E = 8, H = 4;

/** Counts that make cold experts 4..7 of layer 0 much busier than hot 0..3. */
function busyCold(): Uint32Array {
  const c = new Uint32Array(L * E);
  for (let e = 4; e < 8; e++) c[e] = 1000;
  for (let e = 0; e < 4; e++) c[e] = 1;
  return c;
}

function controller(): Controller {
  return new Controller({ boot: identityRowMap('m', L, E, H), frozen: false, budgets: { drain_every: 1, min_average: 1, swaps_per_layer_per_drain: 2 } });
}

test('requested swaps change the map only when they land; their experts are not decided again while in flight', () => {
  const ctl = controller();
  ctl.onStep({ step: 0, tokens: 1, counted: true });
  const d = ctl.drain(0, busyCold());
  assert.equal(d.decided.length, 2);
  const before = ctl.map();
  const asked: Swap[] = [];
  const { applied } = ctl.requestSwaps(8, (s) => asked.push(s));
  assert.equal(applied.length, 2);
  assert.deepEqual(asked, applied);
  assert.ok(rowMapsEqual(ctl.map(), before), 'nothing moved in the map before landing');
  assert.equal(ctl.inFlightCount, 2);
  // The next drain must not name an expert in flight.
  ctl.onStep({ step: 1, tokens: 1, counted: true });
  const d2 = ctl.drain(1, Uint32Array.from(busyCold(), (x) => 2 * x));
  const flying = new Set(asked.flatMap((s) => [s.hotExpert, s.coldExpert]));
  for (const s of d2.decided) assert.ok(!flying.has(s.hotExpert) && !flying.has(s.coldExpert), 'a decision named an expert in flight');
  // Landing (in any order) moves the map; the applied count follows landings.
  const s1 = ctl.land(asked[1]!.layer, asked[1]!.hotRow, asked[1]!.coldRow);
  assert.equal(s1, asked[1]);
  assert.equal(ctl.map().layers_map[0]!.hot[asked[1]!.hotRow], asked[1]!.coldExpert);
  assert.equal(ctl.stats.applied, 1);
  ctl.land(asked[0]!.layer, asked[0]!.hotRow, asked[0]!.coldRow);
  assert.equal(ctl.inFlightCount, 0);
  assert.throws(() => ctl.land(0, 0, 0), /no swap in flight/);
});

test('a queued swap gone stale before its request is refused; one on a row still moving waits', () => {
  const ctl = controller();
  ctl.onStep({ step: 0, tokens: 1, counted: true });
  ctl.drain(0, busyCold());
  const [a] = ctl.pending();
  ctl.exchangeRows(a!.layer, a!.hotRow, a!.coldRow); // a manual exchange makes the first queued swap stale
  const r = ctl.requestSwaps(8, () => {});
  assert.equal(r.refused.length, 1);
  assert.equal(r.applied.length, 1);
  // A restore chains swaps: none starts on a row in flight, all land, the boot map is back.
  const res = ctl.control({ restore_map: true });
  assert.ok(res.ok);
  const inFlight = [...r.applied];
  let guard = 0;
  while ((ctl.queueDepth > 0 || inFlight.length > 0) && guard++ < 100) {
    const started = ctl.requestSwaps(8, (s) => {
      assert.ok(!inFlight.some((f) => f.layer === s.layer && (f.hotRow === s.hotRow || f.coldRow === s.coldRow)), 'a swap started on a row in flight');
    });
    assert.equal(started.refused.length, 0, 'restore swaps are never stale');
    inFlight.push(...started.applied);
    const x = inFlight.shift();
    if (x) ctl.land(x.layer, x.hotRow, x.coldRow);
  }
  assert.ok(rowMapsEqual(ctl.map(), identityRowMap('m', L, E, H)), 'boot map restored');
});

test('swaps not yet requested are decided again at the next drain, on its counts; swaps in flight are kept', () => {
  const ctl = controller();
  ctl.onStep({ step: 0, tokens: 1, counted: true });
  const d = ctl.drain(0, busyCold());
  assert.equal(d.decided.length, 2);
  const flying = ctl.requestSwaps(1, () => {}).applied; // the banks could start one
  assert.equal(flying.length, 1);
  assert.equal(ctl.queueDepth, 1);
  // The traffic turned: cold experts 4..7 went quiet, so the queued swap would now be a loss.
  ctl.onStep({ step: 1, tokens: 1, counted: true });
  const quiet = busyCold(); // cumulative counts: 4..7 gain nothing, the hot ones catch up
  for (let e = 0; e < 4; e++) quiet[e] = 20_000;
  const d2 = ctl.drain(1, quiet);
  assert.equal(d2.decided.length, 0, 'nothing worth moving on the new counts');
  assert.equal(ctl.queueDepth, 0, 'the old decision is gone from the queue');
  assert.equal(ctl.stats.superseded, 1);
  assert.equal(ctl.inFlightCount, 1, 'the requested swap still lands');
  ctl.land(flying[0]!.layer, flying[0]!.hotRow, flying[0]!.coldRow);
  assert.equal(ctl.stats.applied, 1);
});

test('a drain\'s plan is ordered by gain across layers: banks that start one swap take the best, whatever its layer', () => {
  // Layers 0 and 1 have two cold experts each gaining 10 picks over their hot ones; layer 2 one gaining 30.
  const c = new Controller({ boot: identityRowMap('m', 3, E, H), frozen: false, budgets: { drain_every: 1, min_average: 1, swaps_per_layer_per_drain: 2 } });
  const counts = new Uint32Array(3 * E);
  for (const l of [0, 1]) { counts[l * E + 4] = 11; counts[l * E + 5] = 11; counts[l * E + 0] = 1; counts[l * E + 1] = 1; }
  counts[2 * E + 4] = 31; counts[2 * E + 0] = 1;
  c.onStep({ step: 0, tokens: 1, counted: true });
  assert.deepEqual(c.drain(0, counts).decided.map((s) => s.layer), [2, 0, 1, 0, 1], 'largest gain first; equal gains round the layers');
  assert.deepEqual(c.requestSwaps(1, () => {}).applied.map((s) => [s.layer, s.coldExpert]), [[2, 4]]);
});

test('equal gains go round the layers from the one after the last swap started, so no layer waits for its number', () => {
  // 6 layers, every one with the same two pairs to move; the banks start two swaps per drain.
  const L6 = 6;
  const c = new Controller({ boot: identityRowMap('m', L6, E, H), frozen: false, budgets: { drain_every: 1, min_average: 1, swaps_per_layer_per_drain: 2 } });
  const counts = new Uint32Array(L6 * E);
  for (let l = 0; l < L6; l++) { counts[l * E + 4] = 11; counts[l * E + 5] = 11; }
  const firstStart: number[] = [];
  for (let step = 0; step < 3; step++) {
    c.onStep({ step, tokens: 1, counted: true });
    c.drain(step, counts);
    for (const s of c.requestSwaps(2, () => {}).applied) firstStart[s.layer] ??= step;
  }
  assert.deepEqual(firstStart, [0, 0, 1, 1, 2, 2], 'layers 2..5 start in the next drains, not after 0 and 1 are done');
});
