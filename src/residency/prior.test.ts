// The seed prior: shares normalized per layer, decisions it changes (and those it must not), and the
// guarantee that without a prior (or at weight 0) the controller decides exactly as it did before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Controller } from './controller.ts';
import { Counter } from './counts.ts';
import { budgetsPatchSchema, priorScores, priorShares, type Budgets, type Swap } from './policy.ts';
import { identityRowMap } from './rowmap.ts';
import { ResidencyError } from '../errors.ts';
import { priorFromDump } from './prior.ts';
import { randInt, rng, shuffle, skewedRouting } from './test-helpers.ts';

test('priorShares: E x share of the layer, mean 1 per layer; an empty layer is flat', () => {
  const s = priorShares([1, 3, 0, 0, 0, 0, 0, 0, 5, 5, 0, 10], 3, 4);
  assert.deepEqual([...s], [1, 3, 0, 0, 1, 1, 1, 1, 1, 1, 0, 2]);
  for (let l = 0; l < 3; l++) assert.equal(s.slice(l * 4, l * 4 + 4).reduce((a, x) => a + x, 0) / 4, 1);
  // Scale-free: 1000x the counts are the same prior.
  assert.deepEqual([...priorShares([1000, 3000, 0, 0], 1, 4)], [1, 3, 0, 0]);
});

test('priorShares refuses bad input, naming prior and what was expected', () => {
  const refuse = (counts: ArrayLike<number>, re: RegExp) => assert.throws(() => priorShares(counts, 2, 2), (err: unknown) => {
    assert.ok(err instanceof ResidencyError);
    assert.equal(err.code, 'BAD_COUNTS');
    assert.match(err.message, /^prior/);
    assert.match(err.message, re);
    return true;
  });
  refuse([1, 2, 3], /3 counts, expected 2 layers x 2 experts = 4/);
  refuse([1, -1, 3, 4], /prior\[1\].*finite count >= 0, got -1/);
  refuse([1, 2, NaN, 4], /prior\[2\].*got NaN/);
  refuse([1, 2, 3, Infinity], /prior\[3\].*got Infinity/);
});

test('priorScores: decayed + w x prior, into the given array', () => {
  const out = new Float64Array(3);
  const r = priorScores(Float64Array.from([0, 1, 2]), 0.5, Float64Array.from([4, 4, 4]), out);
  assert.equal(r, out);
  assert.deepEqual([...out], [4, 4.5, 5]);
});

// One layer of 4 experts, hot [0, 1], cold [2, 3]; default hysteresis 1.5 and min_average 8. One drain after
// one step makes the decayed counts equal the window's picks (foldWindow at steps = 1 weighs a pick 1).
const oneLayer = identityRowMap('t', 1, 4, 2);
function decideOnce(picks: number[], prior?: number[], budgets: Partial<Budgets> = {}): Swap[] {
  const ctl = new Controller({ boot: oneLayer, frozen: false, budgets, ...(prior ? { prior } : {}) });
  ctl.onStep({ step: 0, tokens: 1, counted: true });
  return ctl.drain(0, Uint32Array.from(picks)).decided.map((s) => ({ ...s }));
}
const pairs = (swaps: Swap[]) => swaps.map((s) => `${s.coldExpert}->${s.hotExpert}`);

test('a cold expert the live counts alone would not promote is promoted when the prior backs it', () => {
  // Cold 2 has 12 picks against hot 0's 10: below hysteresis (15). The prior puts all its mass on 2 (share 4).
  assert.deepEqual(pairs(decideOnce([10, 10, 12, 0])), []);
  assert.deepEqual(pairs(decideOnce([10, 10, 12, 0], [0, 0, 7, 0])), ['2->0']);
  // The same prior at weight 0 (a control file can set it) decides as without one.
  assert.deepEqual(pairs(decideOnce([10, 10, 12, 0], [0, 0, 7, 0], { prior_picks_per_expert: 0 })), []);
});

test('a hot expert the prior backs is kept where the live counts alone would demote it', () => {
  // Hot 0 has 2 picks, cold 2 has 10: swapped on live counts. The prior (share 4 on expert 0, w = 2) adds 8.
  assert.deepEqual(pairs(decideOnce([2, 10, 10, 0])), ['2->0']);
  assert.deepEqual(pairs(decideOnce([2, 10, 10, 0], [3, 0, 0, 0], { prior_picks_per_expert: 2 })), []);
});

test("the prior's influence shrinks as live counts grow: 10x denser traffic decides as without a prior", () => {
  for (const [picks, prior, w] of [[[10, 10, 12, 0], [0, 0, 7, 0], 1], [[2, 10, 10, 0], [3, 0, 0, 0], 2]] as const) {
    const dense = picks.map((p) => p * 10);
    const budgets = { prior_picks_per_expert: w };
    // Sparse: the prior flips the decision (above); dense: the same prior changes nothing.
    assert.notDeepEqual(pairs(decideOnce([...picks], [...prior], budgets)), pairs(decideOnce([...picks])));
    assert.deepEqual(pairs(decideOnce(dense, [...prior], budgets)), pairs(decideOnce(dense)));
  }
});

test('hasPrior reports whether a prior was given; a wrong-sized prior is refused at construction', () => {
  assert.equal(new Controller({ boot: oneLayer }).hasPrior, false);
  assert.equal(new Controller({ boot: oneLayer, prior: [1, 2, 3, 4] }).hasPrior, true);
  assert.throws(() => new Controller({ boot: oneLayer, prior: [1, 2, 3] }), /prior: 3 counts, expected 1 layers x 4 experts = 4/);
});

// A seeded replay with domain shifts (as controller.test.ts drives it), returning the applied swap log.
function replayLog(opts: { prior?: number[]; budgets?: Partial<Budgets> }): string[] {
  const L = 4;
  const E = 32;
  const K = 4;
  const r = rng(7);
  const ctl = new Controller({ boot: identityRowMap('t', L, E, 24), frozen: false, budgets: { drain_every: 16, min_average: 2, ...opts.budgets }, ...(opts.prior ? { prior: opts.prior } : {}) });
  const counter = new Counter(L, E, K);
  const doms = Array.from({ length: 3 }, () => Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i))));
  const log: string[] = [];
  for (let step = 0; step < 3000; step++) {
    const tokens = randInt(r, 1, 4);
    const counted = ctl.shouldCount(tokens);
    if (counted) counter.addPicks(skewedRouting(r, tokens, L, E, K, doms[Math.floor(step / 1000)]!), tokens);
    const rep = ctl.tick({ step, tokens, counted }, () => counter.snapshot());
    for (const s of rep.applied) log.push(`${step}:${s.layer}:${s.coldExpert}->${s.hotExpert}@${s.hotRow}/${s.coldRow}`);
  }
  return log;
}

test('no prior, or prior_picks_per_expert 0, gives exactly the decisions of a controller without one', () => {
  const prior = Array.from({ length: 4 * 32 }, (_, i) => (i * 7919) % 13);
  const today = replayLog({});
  assert.ok(today.length > 20, `the replay swaps (${today.length})`);
  assert.deepEqual(replayLog({ prior, budgets: { prior_picks_per_expert: 0 } }), today);
  // The comparison has power: the same prior at the default weight changes the log.
  assert.notDeepEqual(replayLog({ prior }), today);
});

test('budgets accept prior_picks_per_expert >= 0 and refuse negatives naming the field', () => {
  assert.equal(budgetsPatchSchema.safeParse({ prior_picks_per_expert: 0 }).success, true);
  assert.equal(budgetsPatchSchema.safeParse({ prior_picks_per_expert: 2.5 }).success, true);
  assert.equal(new Controller({ boot: oneLayer }).budgets.prior_picks_per_expert, 1);
  assert.throws(() => new Controller({ boot: oneLayer, budgets: { prior_picks_per_expert: -1 } }),
    (err: unknown) => err instanceof ResidencyError && err.code === 'BAD_CONFIG' && /budgets\.prior_picks_per_expert/.test(err.message));
  const ctl = new Controller({ boot: oneLayer });
  const bad = ctl.control({ budgets: { prior_picks_per_expert: -0.5 } });
  assert.equal(bad.ok, false);
  assert.match(!bad.ok ? bad.error : '', /prior_picks_per_expert/);
  assert.equal(ctl.control({ budgets: { prior_picks_per_expert: 3 } }).ok, true);
  assert.equal(ctl.budgets.prior_picks_per_expert, 3);
});

test('priorFromDump flattens the cumulative table and refuses another geometry or model, naming the source', () => {
  const dump = { version: 1 as const, model: 'm', step: 1, decode_steps: 1, half_life: 500, decayed: [[0, 0], [0, 0]], cumulative: [[1, 2], [3, 4]] };
  assert.deepEqual([...priorFromDump(dump, { models: ['m'], layers: 2, experts: 2 })], [1, 2, 3, 4]);
  assert.deepEqual([...priorFromDump(dump, { layers: 2, experts: 2 })], [1, 2, 3, 4], 'no model names: any model');
  assert.throws(() => priorFromDump(dump, { models: ['m'], layers: 2, experts: 3 }, '--prior x.json'),
    /^ResidencyError: --prior x\.json: the dump is 2 layers x 2 experts but the model m has 2 x 3/);
  assert.throws(() => priorFromDump(dump, { models: ['n', 'map-n'], layers: 2, experts: 2 }, '--prior x.json'),
    /--prior x\.json: the dump is of model 'm', expected 'n' or 'map-n'/);
});
