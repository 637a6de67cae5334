// The host lane's split from measured times: the line fits, the table they give, a fixed share, and a split that
// follows a host whose speed moves.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseTakes, fitLine, fixedTakes, HANDOFF_US, HostSplit, type SplitCounts, type TimeLine } from './host-split.ts';

const P = 32;
const ROW = 9.4e6; // a Qwen3-30B-A3B expert's bf16 bytes

/** Counts of `per` layers (or requests) at each index in xs, each taking line(x) us. */
function measured(line: TimeLine, xs: number[], per = 100): SplitCounts {
  const n = new Float64Array(P + 1), ns = new Float64Array(P + 1);
  for (const x of xs) { n[x] = per; ns[x] = per * (line.fixedUs + line.perExpertUs * x) * 1e3; }
  return { n, ns };
}
const none = (): SplitCounts => ({ n: new Float64Array(P + 1), ns: new Float64Array(P + 1) });

test('fitLine recovers a line from weighted means, keeps the prior slope where one x is all it has, and never fits a negative cost', () => {
  const prior = { fixedUs: 10, perExpertUs: 100 };
  const fit = fitLine([1, 2, 3, 4].map((x) => ({ x, w: 50, y: 15 + 120 * x })), prior);
  assert.ok(Math.abs(fit.fixedUs - 15) < 1e-6 && Math.abs(fit.perExpertUs - 120) < 1e-6, JSON.stringify(fit));
  const one = fitLine([{ x: 2, w: 10, y: 300 }], prior);
  assert.equal(one.perExpertUs, 100);
  assert.equal(one.fixedUs, 100);
  assert.deepEqual(fitLine([], prior), prior);
  const steep = fitLine([{ x: 1, w: 1, y: 10 }, { x: 2, w: 1, y: 400 }], prior);
  assert.equal(steep.fixedUs, 0, 'a negative fixed cost is noise');
  const falling = fitLine([{ x: 1, w: 1, y: 300 }, { x: 3, w: 1, y: 100 }], prior);
  assert.ok(falling.perExpertUs > 0, 'more experts never take less time');
});

test('chooseTakes: the split whose slower side is fastest, for every count of cold experts', () => {
  const host = { fixedUs: 8, perExpertUs: 115 }, gpu = { fixedUs: 25, perExpertUs: 180 };
  const take = chooseTakes(host, gpu, P);
  assert.equal(take[0], 0);
  const cost = (c: number, h: number): number => Math.max(h ? host.fixedUs + HANDOFF_US + host.perExpertUs * h : 0, gpu.fixedUs + gpu.perExpertUs * (c - h));
  for (let c = 1; c <= P; c++) {
    const best = Math.min(...Array.from({ length: c + 1 }, (_, h) => cost(c, h)));
    assert.equal(cost(c, take[c]!), best, `c ${c}`);
    assert.ok(take[c]! >= take[c - 1]! && take[c]! <= take[c - 1]! + 1, 'one more cold expert moves at most one more to the host');
  }
  // A host as fast as this one takes the lone cold expert, and one of two (the bus reads the other meanwhile).
  assert.deepEqual(Array.from(take.slice(0, 5)), [0, 1, 1, 2, 3]);
  // A host slower than the bus leaves it a lone cold expert.
  assert.equal(chooseTakes({ fixedUs: 8, perExpertUs: 300 }, gpu, P)[1], 0);
});

test('fixedTakes: ceil(share x c), a share outside (0, 1] refused by name', () => {
  assert.deepEqual(Array.from(fixedTakes(0.6, P).slice(0, 6)), [0, 1, 2, 2, 3, 3]);
  assert.deepEqual(Array.from(fixedTakes(1, 4)), [0, 1, 2, 3, 4]);
  assert.deepEqual(Array.from(fixedTakes(0.5, 4)), [0, 1, 1, 2, 2]);
  assert.throws(() => fixedTakes(0, P), /host experts: share must be in \(0, 1\], got 0/);
  assert.throws(() => fixedTakes(Number.NaN, P), /share must be in \(0, 1\]/);
});

/** The table for up to 8 cold experts (a batch-1 step at top-8), where the priors' pull on the fit moves no entry. */
const upTo8 = (t: Int32Array): number[] => Array.from(t.slice(0, 9));

test('HostSplit: measured times replace the priors, the table follows a host that slows and speeds up again, a fixed share never moves', () => {
  const split = new HostSplit(ROW, P);
  assert.equal(split.report().mode, 'measured');
  const gpu = { fixedUs: 25, perExpertUs: 180 };
  const fast = { fixedUs: 8, perExpertUs: 110 }, slow = { fixedUs: 8, perExpertUs: 160 };
  const feed = (host: TimeLine): boolean => split.update(measured(host, [1, 2, 3, 4]), measured(gpu, [0, 1, 2, 3]), measured({ fixedUs: 5, perExpertUs: 0 }, [1, 2]));
  for (let i = 0; i < 4; i++) feed(fast);
  assert.deepEqual(upTo8(split.table()), upTo8(chooseTakes(fast, gpu, P)), 'the fast host\'s table');
  const fit = split.report().host;
  assert.ok(Math.abs(fit.perExpertUs - 110) < 3 && Math.abs(split.report().gpu.perExpertUs - 180) < 3, JSON.stringify(split.report()));
  // The host slows: within a few updates (64 steps each) the table is the slow host's.
  let changed = false;
  for (let i = 0; i < 6; i++) changed = feed(slow) || changed;
  assert.ok(changed);
  assert.deepEqual(upTo8(split.table()), upTo8(chooseTakes(slow, gpu, P)), 'the slow host\'s table');
  assert.ok(upTo8(chooseTakes(slow, gpu, P)).some((h, c) => h < chooseTakes(fast, gpu, P)[c]!), 'and the slow host takes fewer');
  for (let i = 0; i < 6; i++) feed(fast);
  assert.deepEqual(upTo8(split.table()), upTo8(chooseTakes(fast, gpu, P)), 'back to the fast host\'s');
  assert.equal(split.report().meanWaitUs, 5, 'the GPU\'s mean wait for the host');
  assert.equal(split.update(none(), none(), none()), false, 'nothing measured: nothing moves');

  const fixed = new HostSplit(ROW, P, 0.6);
  const before = Array.from(fixed.table());
  assert.equal(fixed.update(measured(slow, [1, 2, 3]), measured(gpu, [0, 1, 2]), none()), false);
  assert.deepEqual(Array.from(fixed.table()), before);
  assert.equal(fixed.report().mode, 'fixed');
  assert.ok(Math.abs(fixed.report().host.perExpertUs - 160) < 10, 'a fixed split still reports what it measured');
});
