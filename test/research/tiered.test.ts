// The tiered benchmark's host side on the CPU cost model (no GPU): row exchanges never let a step read a
// row that a copy is writing, and the harness runs every policy over expanded fixture traffic.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RowTable } from '../../bench/research/rows.ts';
import { CpuCostExecutor } from '../../bench/research/executor.ts';
import { loadBenchInputs, runProtocol, POLICIES } from '../../bench/research/bench.ts';
import { BIG } from '../../bench/research/geometry.ts';
import { FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import { mulberry32 } from '../../src/sim/rng.ts';
import { LaggedMover, assertSafeReads, churnWanted } from './helpers.ts';

test('row exchanges: no step reads a row being written, and homes reach the wanted hot set', () => {
  const L = 3; const E = 24; const H = 16;
  const boot = new Uint8Array(L * E);
  for (let l = 0; l < L; l++) for (let e = 0; e < H; e++) boot[l * E + e] = 1;
  for (const lag of [1, 2, 3]) {
    const table = new RowTable(L, E, H, 6, boot);
    const mover = new LaggedMover(lag);
    const want = boot.slice();
    const rand = mulberry32(lag);
    let deferred = 0;
    for (let s = 0; s < 200; s++) {
      if (s < 150) churnWanted(want, rand, L, E, 2);
      deferred += table.beforeStep(want, mover).deferred;
      assertSafeReads(table.slot, mover.writing(), L, E, lag, s);
      table.check();
      mover.step++;
    }
    assert.equal(table.inFlight, 0);
    assert.deepEqual(table.homeHotMask(), want);
    for (let i = 0; i < want.length; i++) assert.equal(table.slot[i]! < H, want[i] === 1);
    assert.ok(deferred > 0 || lag === 1, 'staging limit exercised');
  }
});

test('free moves relabel without copies', () => {
  const boot = new Uint8Array(2 * 8).fill(1, 0, 4).fill(1, 8, 12);
  const table = new RowTable(2, 8, 4, 2, boot);
  const mover = new LaggedMover(1);
  const want = boot.slice();
  want[0] = 0; want[5] = 1;
  const m = table.beforeStep(want, mover, true);
  assert.equal(m.relabelled, 1);
  assert.equal(mover.batches.length, 0);
  assert.ok(table.isCold(0, 0));
  assert.ok(!table.isCold(0, 5));
});

test('harness: every policy on the expanded shift with the CPU cost model', () => {
  const { set, seedCounts } = loadBenchInputs(FIXTURE_TRACES, BIG);
  const cfg = {
    geometry: BIG, protocols: [], policies: POLICIES, insertsPerStep: 8, oracleWindow: 64, fit: 'en+code', seed: 1, seedCounts,
    budgets: { drain_every: 16, half_life_tokens: 60, swaps_per_layer_per_drain: 4, swaps_per_step: 8, min_average: 2 },
  };
  const r = runProtocol(set, { name: 'shift', phases: 'en+code:200,de+ja:300,en+code:100', users: 1 }, cfg, new CpuCostExecutor(BIG));
  const by = new Map(r.figures.map((f) => [f.policy, f]));
  assert.deepEqual([...by.keys()], [...POLICIES]);
  assert.equal(by.get('all-hot')!.phases[1]!.coldShare, 0);
  assert.equal(by.get('all-hot')!.phases[1]!.vsAllHot, 1);
  const fixed = by.get('fixed')!.phases[1]!;
  const adaptive = by.get('adaptive')!.phases[1]!;
  // The shift hurts the fixed map; adaptive moves rows and ends colder-free-er than fixed.
  assert.ok(fixed.coldShare > 2 * by.get('fixed')!.phases[0]!.coldShare, `fixed: ${fixed.coldShare}`);
  assert.ok(adaptive.exchanges > 0 && adaptive.converged < fixed.converged, `adaptive ${adaptive.converged} vs fixed ${fixed.converged}`);
  assert.ok(by.get('lru')!.phases[1]!.exchanges > 0);
  assert.ok(by.get('adaptive-prior')!.phases[1]!.exchanges > 0);
  assert.equal(by.get('oracle')!.phases[1]!.converged, 0);
  assert.ok(by.get('adaptive')!.counterShare > 0);
  for (const run of r.runs) for (let s = 0; s < run.steps; s++) assert.ok(run.stepMs[s]! > 0);
});
