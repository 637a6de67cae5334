// The host lane's split from measured layer times: a fixed share, the start, moves toward the fastest measured
// neighbour (not on noise, not on too few layers), and a split that follows a host whose speed moves; in whole
// experts (1 part an expert) and in quarters (one expert a layer split with the GPU).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mulberry32 } from '../../../util/rng.ts';
import { HOST_STATE } from './lane.ts';
import { fixedTakes, HostSplit, MAX_PARTS, MIN_GAIN, MIN_LAYERS, splitText, START_SHARE, type SplitCells } from './split.ts';

const P = 32;
const CELLS = (P + 1) * (MAX_PARTS * P + 1);
const at = (c: number, h: number): number => c * (MAX_PARTS * P + 1) + h;

/**
 * A model machine: a layer of c cold experts, h parts of them on the host (parts an expert), takes max(host, GPU) us;
 * a split expert costs the exchange of its units (3 us) on both sides.
 */
const machine = (hostUs: number, gpuUs: number, parts = 1) => (c: number, h: number): number => {
  const x = h % parts ? 3 : 0;
  return Math.max(h ? 5 + x + (hostUs * h) / parts : 0, 25 + x + gpuUs * (c - h / parts));
};

/** Empty cells, and one layer of `us` added to cell (c, h) as op_host_collect counts it. */
const emptyCells = (): SplitCells => ({ n: new Float64Array(CELLS), ns: new Float64Array(CELLS), sq: new Float64Array(CELLS) });
function count(cells: SplitCells, c: number, h: number, us: number): void {
  const q = Math.floor((us * 1e3) / 1024);
  cells.n[at(c, h)]! += 1;
  cells.ns[at(c, h)]! += us * 1e3;
  cells.sq[at(c, h)]! += q * q;
}

/** What a model machine's layers vary by: +-0.5%, about a microsecond (no real layer takes the same nanoseconds twice). */
const jitter = { spread: 0.005, draw: mulberry32(7) };

/**
 * The layers of one update as the kernels count them: `per` layers at each c in cs, most at the table's split and
 * every HOST_STATE.explore-th at a neighbour (one part fewer, then one more), each taking time(c, h) times
 * 1 + spread x (a uniform draw in [-1, 1)).
 */
function measure(split: HostSplit, time: (c: number, h: number) => number, cs: number[], per = 160, noise = jitter): SplitCells {
  const cells = emptyCells();
  const parts = split.report().parts;
  for (const c of cs) {
    const t = split.table()[c]!;
    for (let i = 0; i < per; i++) {
      const e = HOST_STATE.explore;
      const h = Math.min(c * parts, Math.max(0, i % e === 0 ? t + ((i / e) & 1 ? 1 : -1) : t));
      count(cells, c, h, time(c, h) * (1 + noise.spread * (2 * noise.draw() - 1)));
    }
  }
  return cells;
}
const noWait = { n: 0, ns: 0 };

test('fixedTakes: ceil(share x c x parts) parts, a share outside (0, 1] refused by name', () => {
  assert.deepEqual(Array.from(fixedTakes(0.6, P).slice(0, 6)), [0, 1, 2, 2, 3, 3]);
  assert.deepEqual(Array.from(fixedTakes(1, 4)), [0, 1, 2, 3, 4]);
  assert.deepEqual(Array.from(fixedTakes(0.5, 4)), [0, 1, 1, 2, 2]);
  assert.deepEqual(Array.from(fixedTakes(0.6, 4, 4)), [0, 3, 5, 8, 10], 'quarters: 0.75, 1.25, 2, 2.5 experts');
  assert.deepEqual(Array.from(fixedTakes(1, 2, 4)), [0, 4, 8]);
  assert.throws(() => fixedTakes(0, P), /host experts: share must be in \(0, 1\], got 0/);
  assert.throws(() => fixedTakes(Number.NaN, P), /share must be in \(0, 1\]/);
});

test('HostSplit starts at ceil(0.6 c) and moves each take[c] to its fastest measured neighbour, one step an update', () => {
  const split = new HostSplit(P);
  assert.deepEqual(Array.from(split.table()), Array.from(fixedTakes(START_SHARE, P)));
  assert.throws(() => new HostSplit(P, 5), /--host-expert-parts: expected an integer in 1\.\.4, got 5/);
  // A host much slower than the bus: the best split gives the host nothing, so take[4] walks 3 -> 2 -> 1 -> 0.
  const slowHost = machine(1000, 180);
  const walk: number[] = [];
  for (let u = 0; u < 6; u++) { split.update(measure(split, slowHost, [4]), noWait); walk.push(split.table()[4]!); }
  assert.deepEqual(walk, [2, 1, 0, 0, 0, 0]);
  assert.equal(split.table()[3], 2, 'counts not measured stay where they were');
  assert.equal(split.report().moves, 3);
  assert.ok(Math.abs(split.report().layerUs[4]! - slowHost(4, 0)) < 1, 'the layer time reported where the split stands');
});

for (const parts of [1, MAX_PARTS]) {
  test(`HostSplit converges to the best split of each count on a model machine, and follows it when the host slows and recovers (${parts} part${parts > 1 ? 's' : ''} an expert)`, () => {
    const split = new HostSplit(P, parts);
    const best = (time: (c: number, h: number) => number, c: number): number => {
      let b = 0;
      for (let h = 1; h <= c * parts; h++) if (time(c, h) < time(c, b)) b = h;
      return b;
    };
    const cs = [1, 2, 3, 4, 5, 6];
    for (const [hostUs, label] of [[90, 'fast host'], [160, 'slow host'], [90, 'fast again']] as const) {
      const time = machine(hostUs, 180, parts);
      // 20 updates a phase (times the parts an expert): a neighbour measured before the host changed speed spreads
      // widely (its old layers and its new) until the old decay, so the rule waits out a change of the host's speed.
      for (let u = 0; u < 20 * parts; u++) split.update(measure(split, time, cs), noWait);
      // Each count's split is its best or within MIN_GAIN of it (a neighbour must win by that much to move it; the
      // model machine's time falls toward the balance point, so a hill climb finds it).
      for (const c of cs) {
        const t = split.table()[c]!;
        assert.ok(time(c, t) <= time(c, best(time, c)) * (1 + MIN_GAIN) + 1e-9, `${label}, c ${c}: take ${t} (${time(c, t)} us), best ${best(time, c)} (${time(c, best(time, c))} us)`);
      }
    }
  });
}

test('in quarters the split balances the sides closer than whole experts can: a layer of 1-3 cold experts on the model machine', () => {
  const whole = new HostSplit(P, 1), quarters = new HostSplit(P, MAX_PARTS);
  const wt = machine(105, 184, 1), qt = machine(105, 184, MAX_PARTS);
  for (let u = 0; u < 48; u++) {
    whole.update(measure(whole, wt, [1, 2, 3]), noWait);
    quarters.update(measure(quarters, qt, [1, 2, 3]), noWait);
  }
  // 1 cold expert: whole, the host's 110 us; in quarters 3 of 4 parts on the host, 87 us. 2: 209 us against 166.
  assert.deepEqual(Array.from(whole.table().slice(1, 4)), [1, 1, 2]);
  assert.equal(quarters.table()[1], 3);
  assert.ok([5, 6].includes(quarters.table()[2]!), `c 2: ${quarters.table()[2]}`);
  assert.equal(quarters.table()[3], 8);
  for (const c of [1, 2]) assert.ok(qt(c, quarters.table()[c]!) < 0.85 * wt(c, whole.table()[c]!), `c ${c}`);
  assert.ok(qt(3, quarters.table()[3]!) <= wt(3, whole.table()[3]!));
});

test('HostSplit does not move on too few layers or on a gain below MIN_GAIN; a fixed share never moves; waits are averaged', () => {
  const split = new HostSplit(P);
  const few = measure(split, machine(600, 180), [2], MIN_LAYERS * 8); // at most MIN_LAYERS / 2 exploring layers per side
  assert.equal(split.update(few, noWait), false, 'a neighbour with too few layers is not compared');
  const fresh = new HostSplit(P);
  const t = fresh.table()[2]!;
  const close = (c: number, h: number): number => (h === t ? 100 : 100 * (1 - MIN_GAIN / 2));
  assert.equal(fresh.update(measure(fresh, close, [2], 400), noWait), false, 'a gain below MIN_GAIN');
  split.update(measure(split, machine(90, 180), [1]), { n: 10, ns: 10 * 12_500 });
  split.update(measure(split, machine(90, 180), [1]), { n: 30, ns: 30 * 2_500 });
  assert.equal(split.report().hostLayers, 40);
  assert.equal(split.report().meanWaitUs, 5);

  const fixed = new HostSplit(P, 1, 0.5);
  for (let u = 0; u < 4; u++) assert.equal(fixed.update(measure(fixed, machine(600, 180), [1, 2, 3, 4]), noWait), false);
  assert.deepEqual(Array.from(fixed.table()), Array.from(fixedTakes(0.5, P)));
  assert.equal(fixed.report().mode, 'fixed');
  assert.ok(fixed.report().layerUs[1]! > 0, 'a fixed split still reports what its layers took');
});

test('HostSplit does not walk on noise: with layers spread +-35%, a split 5% faster than its neighbours stays; a neighbour 12% faster is found', () => {
  const noise = { spread: 0.35, draw: mulberry32(12) };
  const split = new HostSplit(P);
  const start = Array.from(split.table());
  // Each count's start is 5% faster than one part more or fewer, 160 layers a count an update (its share of 64 steps x
  // 16 layers). The rule before (a 2% gain of the means, half of them kept an update) moved this table 116 times.
  const cs = [2, 3, 4, 5];
  const startBest = (c: number, h: number): number => (h === start[c] ? 300 : 315);
  for (let u = 0; u < 200; u++) split.update(measure(split, startBest, cs, 160, noise), noWait);
  assert.equal(split.report().moves, 0, `${split.report().moves} moves (table ${Array.from(split.table().slice(1, 6))})`);
  // One part fewer on the host 12% faster at 3 cold experts: found within 30 updates (half a second of decode).
  const t3 = start[3]!;
  const better = (c: number, h: number): number => (c === 3 && h === t3 - 1 ? 264 : startBest(c, h));
  let u = 0;
  while (split.table()[3] === t3 && u < 30) { split.update(measure(split, better, cs, 160, noise), noWait); u++; }
  assert.equal(split.table()[3], t3 - 1, `moved after ${u} updates`);
  assert.deepEqual(Array.from(split.table()).filter((t, c) => c !== 3), start.filter((t, c) => c !== 3), 'the others stay');
});

test('the exploring layers rotate (host_exchange.cuh\'s rule over the routed-layer count): at 16 MoE layers a slower first layer does not hold the split back', () => {
  // Every layer has 3 cold experts; one on the host is 5% faster than two (the start), but layer 0 runs 4% slower
  // than the others. Were every exploring layer layer 0, the neighbour would measure 98.8 against 100 and never win.
  const L = 16, base = [200, 95, 100, 150]; // by the host's count h
  const split = new HostSplit(P);
  assert.equal(split.table()[3], 2);
  let routed = 0;
  for (let u = 0; u < 8; u++) {
    const cells = emptyCells();
    for (let step = 0; step < 64; step++) {
      for (let layer = 0; layer < L; layer++, routed++) {
        const e = HOST_STATE.explore, t = split.table()[3]!;
        const h = Math.min(3, Math.max(0, routed % e === 0 ? t + (Math.floor(routed / e) & 1 ? 1 : -1) : t));
        count(cells, 3, h, base[h]! * (layer === 0 ? 1.04 : 1));
      }
    }
    split.update(cells, noWait);
  }
  assert.equal(split.table()[3], 1);
});

test('splitText: the table for 1-8 cold experts (in experts), the layer times measured there, the moves and the waits', () => {
  const split = new HostSplit(P);
  split.update(measure(split, machine(90, 180), [1]), { n: 4, ns: 4 * 2_500 });
  assert.equal(splitText(split.report()), `split (measured, 1 part an expert) of 1-8 cold experts 1 2 2 3 3 4 5 5 to the host (a layer's cold phase there ${machine(90, 180)(1, 1)} - - - - - - - us; 0 table moves), the GPU waited 2.5 us a host layer`);
  const quarters = new HostSplit(P, MAX_PARTS, 0.6);
  quarters.update(measure(quarters, machine(90, 180, MAX_PARTS), [1]), { n: 4, ns: 4 * 2_500 }, { n: 2, ns: 2 * 1_500 });
  assert.equal(splitText(quarters.report()), `split (fixed, 4 parts an expert) of 1-8 cold experts 0.75 1.25 2 2.5 3 3.75 4.25 5 to the host (a layer's cold phase there ${machine(90, 180, MAX_PARTS)(1, 3).toFixed(0)} - - - - - - - us; 0 table moves), the GPU waited 2.5 us a host layer, 1.5 us for the host's units at 2 split layers`);
});
