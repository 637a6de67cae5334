// The residency driver against an in-memory backend: the four verbs, telemetry files, control file, GO, restore.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { identityRowMap, rowMapsEqual } from '../residency/rowmap.ts';
import { rng, shuffle, skewedRouting } from '../residency/test-helpers.ts';
import { FAKE_GEOMETRY, fakeBackend } from './fake-backend.ts';
import { mapFromBanks } from '../backend/bank-map.ts';
import { ResidencyDriver } from './residency-driver.ts';
import type { ExpertBanks } from '../backend/backend.ts';

const { L, E, H, K } = FAKE_GEOMETRY;

/** The engine's part of the loop: ask whether to count, "run" the step (count its picks), report it. */
function run(driver: ResidencyDriver, backend: ReturnType<typeof fakeBackend>, from: number, steps: number, domain: number[][], r: () => number) {
  for (let step = from; step < from + steps; step++) {
    const tokens = 1 + (step % 3);
    const counted = driver.countStep(tokens);
    if (counted) backend.counter.addPicks(skewedRouting(r, tokens, L, E, K, domain), tokens);
    driver.afterStep({ step, tokens, counted, durationNs: 1000 });
  }
}

const domainOf = (r: () => number) => Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i)));

test('boots frozen; GO starts adaptation; telemetry, swaps and the ring are written; restore gives the boot digest back', () => {
  const dir = mkdtempSync(join(tmpdir(), 'residency-driver-'));
  const backend = fakeBackend();
  const logs: string[] = [];
  const driver = new ResidencyDriver({
    backend, dir, pollEvery: 1, log: (m) => logs.push(m),
    budgets: { drain_every: 8, half_life_tokens: 40, min_average: 1, swaps_per_step: 3 },
  });
  const bootDigest = backend.banks.digest();
  const r = rng(21);
  run(driver, backend, 0, 200, domainOf(r), r);
  assert.equal(backend.banks.swaps, 0, 'frozen at boot: counting only');
  assert.ok(backend.counter.snapshot().some((x) => x > 0));

  writeFileSync(join(dir, 'GO'), '');
  let step = 200;
  for (let phase = 0; phase < 6; phase++, step += 300) run(driver, backend, step, 300, domainOf(r), r);
  assert.ok(logs.some((m) => m.includes('baseline')), logs.join('\n'));
  assert.ok(backend.banks.swaps > 20, `swaps ${backend.banks.swaps}`);
  assert.ok(rowMapsEqual(mapFromBanks(backend.banks, 'fake-moe'), driver.controller.map()), 'banks follow the controller map');

  const [boot, ...telemetry] = readFileSync(join(dir, 'telemetry.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(boot.type, 'boot', 'a run starts with its boot record');
  assert.equal(telemetry.length, driver.controller.stats.drains);
  assert.ok(telemetry.every((t) => t.v === 1 && t.cold_share >= 0 && t.cold_share <= 1 && t.cold_share_by_layer.length === L));
  const [swapsBoot, ...swapLines] = readFileSync(join(dir, 'swaps.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(swapsBoot.run, boot.run);
  assert.equal(swapLines.length, backend.banks.swaps);
  const ring = driver.ring.dump();
  assert.ok(ring.swaps.every((n) => n <= 3), 'per-step budget');
  assert.equal(ring.swaps.reduce((a, b) => a + b, 0), backend.banks.swaps, 'the ring saw every swap');

  writeFileSync(join(dir, 'control.json'), JSON.stringify({ restore_map: true, dump_counts: 'counts.json' }));
  run(driver, backend, step, 400, domainOf(r), r);
  assert.equal(backend.banks.digest(), bootDigest, 'restore: bank bytes identical to boot');
  assert.ok(rowMapsEqual(mapFromBanks(backend.banks, 'fake-moe'), identityRowMap('fake-moe', L, E, H)));
  assert.ok(existsSync(join(dir, 'counts.json')));
  driver.close();
  assert.equal(JSON.parse(readFileSync(join(dir, 'steps.json'), 'utf8')).v, 1);
});

test('a rejected control file is logged and changes nothing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'residency-driver-'));
  const backend = fakeBackend();
  const logs: string[] = [];
  const driver = new ResidencyDriver({ backend, dir, pollEvery: 1, log: (m) => logs.push(m), frozen: false, budgets: { drain_every: 4 } });
  const before = JSON.stringify([driver.controller.budgets, driver.controller.frozen, driver.controller.counting]);
  for (const bad of ['{"freeze": "no"}', '{"budgets": {"hysteresis": 0.9}}', '{not json', '{"restore": true}']) {
    writeFileSync(join(dir, 'control.json'), bad);
    driver.pollControl();
    assert.match(logs.at(-1)!, /rejected, nothing changed/);
    assert.equal(JSON.stringify([driver.controller.budgets, driver.controller.frozen, driver.controller.counting]), before);
  }
  writeFileSync(join(dir, 'control.json'), '{"counting": false, "budgets": {"count_tmax": 1}}');
  driver.pollControl();
  assert.equal(driver.countStep(1), false);
  assert.equal(driver.controller.budgets.count_tmax, 1);
});

test('--map places the banks before the first step and becomes the restore target', () => {
  const backend = fakeBackend();
  const map = { ...identityRowMap('fake-moe', L, E, H), layers_map: Array.from({ length: L }, () => ({ hot: [15, 14, 13, 3, 4, 5, 6, 7, 8, 9, 10, 11], cold: [12, 0, 1, 2] })) };
  const driver = new ResidencyDriver({ backend, map, log: () => {} });
  assert.ok(rowMapsEqual(mapFromBanks(backend.banks, 'fake-moe'), map));
  assert.ok(rowMapsEqual(driver.controller.boot, map));
  assert.throws(() => new ResidencyDriver({ backend: fakeBackend(), map: identityRowMap('x', L, E, 8), log: () => {} }), /geometry is fixed/);
});

test('a dump_counts that cannot be written rejects the whole command: nothing else changes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'residency-driver-'));
  writeFileSync(join(dir, 'a-file'), 'x'); // a folder path through a file fails for every user, root included
  const backend = fakeBackend();
  const driver = new ResidencyDriver({ backend, dir, log: () => {}, frozen: true });
  const state = () => JSON.stringify([driver.controller.budgets, driver.controller.frozen, driver.controller.counting, driver.controller.pending()]);
  const before = state();
  for (const path of [join(dir, 'a-file', 'counts.json'), 'a-file/sub/counts.json', dir]) {
    const r = driver.control({ freeze: false, counting: false, budgets: { swaps_per_step: 1 }, dump_counts: path });
    assert.equal(r.ok, false, path);
    assert.match(!r.ok ? r.error : '', /dump_counts/);
    assert.equal(state(), before, `nothing changed after a failed dump to ${path}`);
  }
  const ok = driver.control({ freeze: false, dump_counts: 'counts.json' });
  assert.equal(ok.ok, true);
  assert.ok(existsSync(join(dir, 'counts.json')));
  assert.equal(driver.controller.frozen, false);
  assert.deepEqual(ok.ok && ok.changes[0], 'dump_counts -> counts.json');
});

test('a telemetry folder that vanishes or turns unwritable mid-run is logged, not thrown into the step loop', () => {
  const dir = mkdtempSync(join(tmpdir(), 'residency-driver-'));
  const backend = fakeBackend();
  const logs: string[] = [];
  const driver = new ResidencyDriver({ backend, dir, log: (m) => logs.push(m), frozen: false, budgets: { drain_every: 4 } });
  const r = rng(5);
  const domain = domainOf(r);
  run(driver, backend, 0, 8, domain, r);
  rmSync(dir, { recursive: true });
  run(driver, backend, 8, 8, domain, r); // the folder is made again
  assert.ok(existsSync(join(dir, 'telemetry.jsonl')));
  rmSync(dir, { recursive: true });
  writeFileSync(dir, 'now a file'); // cannot be made again
  const swapsBefore = backend.banks.swaps;
  assert.doesNotThrow(() => run(driver, backend, 16, 400, domainOf(r), r));
  assert.ok(backend.banks.swaps > swapsBefore, 'swaps still applied');
  assert.ok(driver.ring.dump().recorded >= 416);
  assert.doesNotThrow(() => driver.close());
  const complaints = logs.filter((m) => /telemetry/.test(m));
  assert.ok(complaints.length >= 1 && complaints.length <= 3, `logged once per file, not per line: ${complaints.join(' | ')}`);
  rmSync(dir);
});

test('a prior (counts dump of this model) reaches the controller; another geometry or model is refused before the banks move', () => {
  const rows = (layers: number, experts: number) => Array.from({ length: layers }, (_, l) => Array.from({ length: experts }, (_, e) => (e * 3 + l) % 7));
  const dump = (model: string, layers: number, experts: number) => ({ version: 1 as const, model, step: 10, decode_steps: 10, half_life: 500, decayed: rows(layers, experts), cumulative: rows(layers, experts) });
  const logs: string[] = [];
  const ok = new ResidencyDriver({ backend: fakeBackend(), prior: { dump: dump('fake-moe', L, E), source: '--prior d.json' }, log: (m) => logs.push(m) });
  assert.equal(ok.controller.hasPrior, true);
  assert.ok(logs.some((m) => m.includes('seed prior from --prior d.json')), logs.join('\n'));
  assert.equal(new ResidencyDriver({ backend: fakeBackend(), log: () => {} }).controller.hasPrior, false);

  // A map that would move rows: a refused prior must leave the banks as they were.
  const id = identityRowMap('fake-moe', L, E, H);
  const map = { ...id, layers_map: [{ hot: [...id.layers_map[0]!.hot.slice(1), 12], cold: [0, ...id.layers_map[0]!.cold.slice(1)] }, ...id.layers_map.slice(1)] };
  for (const [d, re] of [
    [dump('fake-moe', L, E + 1), /--prior d\.json: the dump is 3 layers x 17 experts but the model fake-moe has 3 x 16/],
    [dump('other-moe', L, E), /--prior d\.json: the dump is of model 'other-moe', expected 'fake-moe'/],
  ] as const) {
    const backend = fakeBackend();
    const before = backend.banks.digest();
    assert.throws(() => new ResidencyDriver({ backend, map, prior: { dump: d, source: '--prior d.json' }, log: () => {} }),
      (err: unknown) => err instanceof Error && (err as { code?: string }).code === 'BAD_COUNTS' && re.test(err.message));
    assert.equal(backend.banks.digest(), before, 'banks untouched');
  }
});

test('banks that move in the background: moves land steps later, the map follows only on landing, restore gives the boot digest', () => {
  const backend = fakeBackend();
  const banks = backend.banks;
  // Requests land four steps after they were made (takeLanded runs twice a step: before and after requesting).
  const pending: { layer: number; hotRow: number; coldRow: number; age: number }[] = [];
  const delayed: ExpertBanks = {
    layers: banks.layers, experts: banks.experts, hotPerLayer: banks.hotPerLayer,
    slotOf: (l, e) => banks.slotOf(l, e),
    expertAt: (l, b, r) => banks.expertAt(l, b, r),
    swapRows: (l, h, c) => banks.swapRows(l, h, c),
    digest: () => banks.digest(),
    requestSwap(layer, hotRow, coldRow) {
      if (pending.some((p) => p.layer === layer && (p.hotRow === hotRow || p.coldRow === coldRow))) throw new Error('already moving');
      pending.push({ layer, hotRow, coldRow, age: 0 });
    },
    takeLanded() {
      for (const p of pending) p.age++;
      const out = pending.filter((p) => p.age > 8);
      for (const p of out) { pending.splice(pending.indexOf(p), 1); banks.swapRows(p.layer, p.hotRow, p.coldRow); }
      return out.map(({ layer, hotRow, coldRow }) => ({ layer, hotRow, coldRow }));
    },
    get moving() { return pending.length; },
    // One exchange in flight at a time (a single copy slot): slower than the policy decides.
    get startable() { return pending.length === 0 ? 1 : 0; },
  };
  const be = { ...backend, banks: delayed };
  const driver = new ResidencyDriver({ backend: be, frozen: false, log: () => {}, budgets: { drain_every: 8, half_life_tokens: 40, min_average: 1, swaps_per_step: 3, swaps_per_layer_per_drain: 4 } });
  const bootDigest = banks.digest();
  const r = rng(5);
  let step = 0;
  let sawInFlight = false;
  for (let phase = 0; phase < 4; phase++, step += 200) {
    const domain = domainOf(r);
    for (let s = step; s < step + 200; s++) {
      const tokens = 2;
      const counted = driver.countStep(tokens);
      if (counted) backend.counter.addPicks(skewedRouting(r, tokens, L, E, K, domain), tokens);
      driver.afterStep({ step: s, tokens, counted, durationNs: 1000 });
      // Between steps the controller's map is exactly the banks' (landed) map, moves in flight or not.
      assert.ok(rowMapsEqual(mapFromBanks(banks, 'fake-moe'), driver.controller.map()), `step ${s}: the map ran ahead of the banks`);
      sawInFlight ||= pending.length > 0;
      assert.ok(pending.length <= 1, `step ${s}: ${pending.length} requested, more than the banks could start`);
    }
  }
  assert.ok(sawInFlight && banks.swaps > 20, `swaps ${banks.swaps}`);
  assert.ok(driver.controller.stats.superseded > 0, 'swaps the banks could not start were decided again at the next drain');
  const res = driver.control({ restore_map: true });
  assert.ok(res.ok);
  for (let s = step; s < step + 400 && (driver.controller.queueDepth > 0 || pending.length > 0); s++) driver.afterStep({ step: s, tokens: 1, counted: false, durationNs: 1000 });
  assert.equal(pending.length, 0);
  assert.equal(banks.digest(), bootDigest, 'restore through background moves gives the boot digest');
});
