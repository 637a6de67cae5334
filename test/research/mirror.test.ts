// Mirror moves (bench/research/mirror-rows.ts, --moves mirror) on the CPU: one host->device copy per move from
// a host mirror of every row, no staging rows, no device->host copies, and no step reads a row being written.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MirrorRowTable } from '../../bench/research/mirror-rows.ts';
import type { RowCopy } from '../../bench/research/rows.ts';
import { CpuCostExecutor, type StepTimes, type TieredExecutor } from '../../bench/research/executor.ts';
import { loadBenchInputs, runProtocol } from '../../bench/research/bench.ts';
import { BIG, benchGeometry, hostBankBytes, hostRowsPerLayer, movesInFlight, withMoves, type TieredGeometry } from '../../bench/research/geometry.ts';
import type { StepPlan } from '../../bench/research/plan.ts';
import { FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import { ResidencyError } from '../../src/errors.ts';
import { mulberry32 } from '../../src/sim/rng.ts';
import { LaggedMover, assertSafeReads, churnWanted } from './helpers.ts';

test('mirror moves: no step reads a row being written, one host->device copy per move, homes reach the wanted set', () => {
  const L = 3; const E = 24; const H = 16; const cap = 2;
  const boot = new Uint8Array(L * E);
  for (let l = 0; l < L; l++) for (let e = 0; e < H; e++) boot[l * E + e] = 1;
  for (const lag of [1, 2, 3]) {
    const table = new MirrorRowTable(L, E, H, cap, boot);
    const mover = new LaggedMover(lag);
    const want = boot.slice();
    const rand = mulberry32(lag);
    let deferred = 0;
    let started = 0;
    let finished = 0;
    for (let s = 0; s < 200; s++) {
      if (s < 150) churnWanted(want, rand, L, E, 4);
      const m = table.beforeStep(want, mover);
      deferred += m.deferred; started += m.started; finished += m.finished;
      assert.equal(m.writing, 0);
      assert.ok(table.inFlight <= cap);
      assertSafeReads(table.slot, mover.writing(), L, E, lag, s, (_l, e, slot) =>
        assert.ok(slot < H || slot === H + e, `lag ${lag} step ${s}: expert ${e} reads slot ${slot}, neither a hot row nor its mirror row`));
      table.check();
      mover.step++;
    }
    assert.equal(table.inFlight, 0);
    assert.equal(finished, started);
    assert.deepEqual(table.homeHotMask(), want);
    for (let i = 0; i < want.length; i++) assert.equal(table.slot[i]! < H, want[i] === 1);
    // One copy per move, every one mirror(B) -> a hot row: host->device, no staging, nothing written to host memory.
    const copies = mover.batches.flatMap((b) => b.copies);
    assert.equal(copies.length, started);
    assert.ok(started > 0);
    for (const c of copies) {
      assert.ok(c.src >= H && c.src < H + E, `copy from slot ${c.src} is not a mirror row`);
      assert.ok(c.dst < H, `copy to slot ${c.dst} is not a hot row`);
    }
    assert.ok(deferred > 0 || lag === 1, 'in-flight cap exercised');
  }
});

test('mirror moves: free mode relabels without copies', () => {
  const boot = new Uint8Array(2 * 8).fill(1, 0, 4).fill(1, 8, 12);
  const table = new MirrorRowTable(2, 8, 4, 2, boot);
  const mover = new LaggedMover(1);
  const want = boot.slice();
  want[0] = 0; want[5] = 1;
  const m = table.beforeStep(want, mover, true);
  assert.equal(m.relabelled, 1);
  assert.equal(m.started, 0);
  assert.equal(mover.batches.length, 0);
  assert.ok(table.isCold(0, 0));
  assert.equal(table.slot[0], 4 + 0); // expert 0 reads its mirror row
  assert.equal(table.slot[5], 0); // expert 5 took expert 0's hot row
  assert.ok(!table.isCold(0, 5));
  table.check();
  assert.deepEqual(table.homeHotMask(), want);
});

test('mirror geometry: host bank of E rows per layer, no staging, the same pipeline depth; --host-gib refuses the full mirror', () => {
  const m = withMoves(BIG, 'mirror');
  assert.equal(hostRowsPerLayer(m), 384);
  assert.equal(hostRowsPerLayer(BIG), 89);
  assert.equal(m.stagingRows, 0);
  assert.equal(movesInFlight(m), movesInFlight(BIG));
  assert.equal(movesInFlight(BIG), 32);
  assert.equal(withMoves(m, 'exchange').stagingRows, 64);
  assert.equal(withMoves(BIG, 'exchange'), BIG);
  const g8 = benchGeometry(BIG, { layers: 8, moves: 'mirror', hostGib: 80 });
  assert.equal(g8.layers, 8);
  assert.equal(hostBankBytes(g8), 8 * 384 * 18 * 2 ** 20);
  assert.equal(benchGeometry(BIG, { layers: 16, moves: 'exchange', hostGib: 80 }), BIG);
  assert.throws(() => benchGeometry(BIG, { layers: 16, moves: 'mirror', hostGib: 80 }),
    (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_ARGUMENT' && /--moves mirror/.test(e.message) && /--layers/.test(e.message) && /--host-gib 80/.test(e.message));
  assert.throws(() => benchGeometry(BIG, { layers: 8, moves: 'swap', hostGib: 80 }), /--moves 'swap'/);
  assert.throws(() => benchGeometry(BIG, { layers: 17, moves: 'exchange', hostGib: 80 }), /--layers 17/);
});

/** The CPU cost model, recording every copy and checking each step's reads against the copies in flight. */
class RecordingExecutor implements TieredExecutor {
  readonly name = 'recording cpu-model';
  readonly copies: RowCopy[] = [];
  private readonly batches: Array<{ ticket: number; copies: readonly RowCopy[] }> = [];
  readStaging = 0;
  readWritten = 0;
  constructor(readonly geometry: TieredGeometry, private readonly inner = new CpuCostExecutor(geometry)) {}
  step(slots: Int32Array, plan: StepPlan, picks: Uint16Array | null, tokens: number): StepTimes {
    const g = this.geometry;
    const writing = new Set<string>();
    for (const b of this.batches) if (!this.inner.done(b.ticket)) for (const c of b.copies) writing.add(`${c.layer}:${c.dst}`);
    for (let l = 0; l < g.layers; l++) {
      for (let j = 0; j < plan.counts[l]!; j++) {
        const slot = slots[l * g.experts + plan.items[(l * plan.maxItems + j) * 8]!]!;
        if (slot >= g.hotPerLayer + hostRowsPerLayer(g)) this.readStaging++;
        if (writing.has(`${l}:${slot}`)) this.readWritten++;
      }
    }
    return this.inner.step(slots, plan, picks);
  }
  copy(copies: readonly RowCopy[]): number {
    this.copies.push(...copies);
    const ticket = this.inner.copy(copies);
    this.batches.push({ ticket, copies });
    return ticket;
  }
  done(ticket: number): boolean { return this.inner.done(ticket); }
  close(): void {}
}

test('harness: the shift on the CPU cost model with --moves mirror (fixed, adaptive, oracle-phase)', () => {
  const g = benchGeometry(BIG, { layers: 8, moves: 'mirror', hostGib: 80 });
  const { set, seedCounts } = loadBenchInputs(FIXTURE_TRACES, g);
  const cfg = {
    geometry: g, protocols: [], policies: ['fixed', 'adaptive', 'oracle-phase'], insertsPerStep: 8, oracleWindow: 64, fit: 'en+code', seed: 1, seedCounts,
    budgets: { drain_every: 16, half_life_tokens: 60, swaps_per_layer_per_drain: 4, swaps_per_step: 8, min_average: 2 },
  };
  const exec = new RecordingExecutor(g);
  const r = runProtocol(set, { name: 'shift', phases: 'en+code:150,de+ja:300,en+code:50', users: 1 }, cfg, exec);
  const by = new Map(r.figures.map((f) => [f.policy, f]));
  const fixed = by.get('fixed')!.phases[1]!;
  const adaptive = by.get('adaptive')!.phases[1]!;
  const oracle = by.get('oracle-phase')!.phases[1]!;
  assert.equal(fixed.exchanges, 0);
  assert.ok(adaptive.exchanges > 0, 'adaptive moves rows');
  assert.ok(adaptive.converged < fixed.converged, `adaptive converged ${adaptive.converged} vs fixed ${fixed.converged}`);
  assert.ok(oracle.converged <= adaptive.converged, `oracle-phase ${oracle.converged} vs adaptive ${adaptive.converged}`);
  // Every copy is mirror(B) -> a hot row (host->device), one per move started; no staging row is ever read.
  assert.ok(exec.copies.length > 0);
  let started = 0;
  for (const run of r.runs) for (let s = 0; s < run.steps; s++) started += run.started[s]!;
  const relabelled = r.runs.find((x) => x.policy === 'oracle-phase')!;
  let free = 0;
  for (let s = 0; s < relabelled.steps; s++) free += relabelled.started[s]!;
  assert.equal(exec.copies.length, started - free);
  for (const c of exec.copies) {
    assert.ok(c.src >= g.hotPerLayer && c.src < g.hotPerLayer + g.experts, `copy from slot ${c.src} is not a mirror row`);
    assert.ok(c.dst < g.hotPerLayer, `copy to slot ${c.dst} is not a hot row`);
  }
  assert.equal(exec.readStaging, 0);
  assert.equal(exec.readWritten, 0);
});
