// DIR/map.json (issue 46 item 9): the map the banks hold, written atomically as moves land (with the boot map
// and the counts), so a restart resumes from it; a crash at any point leaves a map that loads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readMapRecord, resumeMap } from '../residency/map-file.ts';
import { rng, shuffle, skewedRouting } from '../residency/test-helpers.ts';
import { readLiveRun, replaySwaps } from './analyze.ts';
import { FAKE_GEOMETRY, fakeBackend } from '../engine/fake-backend.ts';
import { ResidencyDriver } from '../engine/residency-driver.ts';
import { mapFromBanks } from '../backend/bank-map.ts';

const { L, E, K } = FAKE_GEOMETRY;

function withDir(body: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'map-file-'));
  return Promise.resolve(body(dir)).finally(() => rmSync(dir, { recursive: true, force: true }));
}

/** Steps of skewed traffic whose domain changes every 96 steps, so swaps keep landing. */
function drive(driver: ResidencyDriver, backend: ReturnType<typeof fakeBackend>, steps: number, seed = 3, from = 0): void {
  const r = rng(seed);
  let domain: number[][] = [];
  for (let step = from; step < from + steps; step++) {
    if ((step - from) % 96 === 0) domain = Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i)));
    const counted = driver.countStep(1);
    if (counted) backend.counter.addPicks(skewedRouting(r, 1, L, E, K, domain), 1);
    driver.afterStep({ step, tokens: 1, counted, durationNs: 1000 });
  }
}

const budgets = { drain_every: 8, min_average: 1 };

test('map.json holds the run\'s map from its start, follows the moves as they land, and the last one at close, with the boot map and the counts', () => withDir(async (dir) => {
  const backend = fakeBackend();
  const driver = new ResidencyDriver({ backend, dir, log: () => {}, frozen: false, budgets, mapFlushMs: 0 });
  const atStart = readMapRecord(join(dir, 'map.json'))!;
  assert.equal(atStart.source, 'default');
  assert.deepEqual(atStart.map, mapFromBanks(backend.banks, 'fake-moe'), 'written at start, before any move');
  drive(driver, backend, 400);
  await driver.mapSettled();
  assert.ok(driver.controller.stats.applied > 0, 'swaps landed');
  const mid = readMapRecord(join(dir, 'map.json'))!;
  assert.deepEqual(mid.map, driver.controller.map(), 'the background write caught up with the moves');
  assert.deepEqual(mid.boot_map, atStart.map);
  assert.equal(mid.swaps_applied, driver.controller.stats.applied);
  assert.ok(mid.counts.cumulative.flat().some((x) => x > 0), 'the counts the map came from');
  drive(driver, backend, 100, 4, 400);
  driver.close();
  await driver.mapSettled(); // a background write still running when close() wrote must not land after it
  const last = readMapRecord(join(dir, 'map.json'))!;
  assert.deepEqual(last.map, mapFromBanks(backend.banks, 'fake-moe'), 'at close: the map the banks hold');
  assert.deepEqual(readdirSync(dir).filter((n) => n.endsWith('.tmp')), [], 'no temporary file left');
}));

test('a restart resumes from map.json: the banks are placed at it and the record says so', () => withDir((dir) => {
  const first = fakeBackend();
  const d1 = new ResidencyDriver({ backend: first, dir, log: () => {}, frozen: false, budgets, mapFlushMs: 0 });
  drive(d1, first, 400);
  d1.close();
  const saved = readMapRecord(join(dir, 'map.json'))!;
  assert.ok(saved.swaps_applied > 0);
  const second = fakeBackend();
  const d2 = new ResidencyDriver({ backend: second, dir, log: () => {}, map: saved.map, mapSource: 'resumed' });
  assert.deepEqual(mapFromBanks(second.banks, 'fake-moe'), saved.map, 'the new banks hold the saved map');
  const now = readMapRecord(join(dir, 'map.json'))!;
  assert.equal(now.source, 'resumed');
  assert.deepEqual(now.boot_map, saved.map);
  const boots = readFileSync(join(dir, 'telemetry.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.type === 'boot');
  assert.equal(boots.at(-1).map_source, 'resumed');
  d2.close();
}));

test('a leftover temporary file (a write cut short) is ignored and removed; a map.json that does not parse is refused, naming the file', () => withDir((dir) => {
  const backend = fakeBackend();
  new ResidencyDriver({ backend, dir, log: () => {}, frozen: true }).close();
  const good = readFileSync(join(dir, 'map.json'), 'utf8');
  writeFileSync(join(dir, 'map.json.4242.7.tmp'), good.slice(0, good.length >> 1));
  assert.deepEqual(readMapRecord(join(dir, 'map.json'))!.map, mapFromBanks(backend.banks, 'fake-moe'));
  new ResidencyDriver({ backend: fakeBackend(), dir, log: () => {}, frozen: true }).close();
  assert.ok(!existsSync(join(dir, 'map.json.4242.7.tmp')), 'removed at start');
  writeFileSync(join(dir, 'map.json'), good.slice(0, 100));
  assert.throws(() => readMapRecord(join(dir, 'map.json')), (e: Error) => /map\.json: not JSON/.test(e.message));
}));

/**
 * A child that restarts on `dir` as serve does (resuming map.json, carried forward by the swap log) and then moves
 * rows as fast as it can, writing map.json every 150 ms while moves land; it prints "ready" once it runs.
 */
const CHILD = (dir: string, seed: number) => `
  import { resumeMap } from ${JSON.stringify(new URL('../residency/map-file.ts', import.meta.url).href)};
  import { rng, shuffle, skewedRouting } from ${JSON.stringify(new URL('../residency/test-helpers.ts', import.meta.url).href)};
  import { fakeBackend, FAKE_GEOMETRY } from ${JSON.stringify(new URL('../engine/fake-backend.ts', import.meta.url).href)};
  import { ResidencyDriver } from ${JSON.stringify(new URL('../engine/residency-driver.ts', import.meta.url).href)};
  const { L, E, K } = FAKE_GEOMETRY;
  const dir = ${JSON.stringify(dir)};
  const saved = resumeMap(dir);
  const backend = fakeBackend();
  const driver = new ResidencyDriver({ backend, dir, log: () => {}, frozen: false, budgets: { drain_every: 4, min_average: 0.5, swaps_per_step: 4 }, mapFlushMs: 150, stepsFlushMs: 0,
    ...(saved ? { map: saved.map, mapSource: 'resumed' } : {}) });
  console.log('ready');
  const r = rng(${seed});
  let domain = [];
  for (let step = 0; ; step++) {
    if (step % 24 === 0) domain = Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i)));
    const counted = driver.countStep(1);
    if (counted) backend.counter.addPicks(skewedRouting(r, 1, L, E, K, domain), 1);
    driver.afterStep({ step, tokens: 1, counted, durationNs: 1000 });
    if (step % 8 === 7) await new Promise((res) => setImmediate(res)); // let the background writes run
  }`;

test('SIGKILL at random points while moves land: each restart finds a map that loads and resumes at the last move recorded', () => withDir(async (dir) => {
  const r = rng(99);
  const seen = new Set<string>();
  let moved = 0;
  for (let kill = 0; kill < 12; kill++) {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD(dir, kill + 1)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s; });
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding('utf8').on('data', (s: string) => { if (s.includes('ready')) resolve(); });
      child.once('exit', () => reject(new Error(`the child exited before it ran: ${err}`)));
    });
    await new Promise((res) => setTimeout(res, 20 + Math.floor(r() * 400)));
    child.kill('SIGKILL');
    await new Promise((res) => child.once('exit', res));
    const rec = readMapRecord(join(dir, 'map.json'));
    assert.ok(rec, `kill ${kill}: map.json is there`);
    const resume = resumeMap(dir)!;
    // Nothing of the map is lost: the restart resumes where the killed run's swap log ends, past map.json.
    assert.deepEqual(resume.map, replaySwaps(dir).map, `kill ${kill}: resumed at the last move recorded`);
    moved += resume.movesAfter;
    seen.add(JSON.stringify(resume.map.layers_map));
    assert.doesNotThrow(() => readLiveRun(dir), `kill ${kill}: the telemetry reads`);
  }
  assert.ok(seen.size > 1, 'the map moved between kills (the runs did swap)');
  assert.ok(moved > 0, 'some kills came after moves map.json did not hold yet: the swap log carried them');
}));
