// A residency folder reused across restarts, read back: every run starts each .jsonl with a boot record, and the
// live-run analysis reads the last run only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FAKE_GEOMETRY, fakeBackend } from '../engine/fake-backend.ts';
import { ResidencyDriver, type ResidencyDriverOptions } from '../engine/residency-driver.ts';
import { rng, shuffle, skewedRouting } from '../residency/test-helpers.ts';
import { analyzeLiveRun, readLiveRun } from './analyze.ts';

const { L, E, K } = FAKE_GEOMETRY;
const lines = (path: string) => readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l));

/** One process's run: a driver on the folder, `steps` steps of skewed traffic, then close (unless `kill`). */
function runOnce(dir: string, steps: number, opts: Partial<ResidencyDriverOptions> & { kill?: boolean } = {}) {
  const backend = fakeBackend();
  const logs: string[] = [];
  const driver = new ResidencyDriver({ backend, dir, pollEvery: 1, log: (m) => logs.push(m), frozen: false, budgets: { drain_every: 8, min_average: 1 }, ...opts });
  const r = rng(7);
  const domain = Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i)));
  for (let step = 0; step < steps; step++) {
    const counted = driver.countStep(1);
    if (counted) backend.counter.addPicks(skewedRouting(r, 1, L, E, K, domain), 1);
    driver.afterStep({ step, tokens: 1, counted, durationNs: 1000 });
  }
  if (!opts.kill) driver.close();
  return { driver, logs };
}

function withDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'restarts-'));
  try { body(dir); } finally { rmSync(dir, { recursive: true, force: true }); }
}

test('every run starts each .jsonl with a boot record; analyze reads the last run only (no negative T90 from step 0 again)', () => withDir((dir) => {
  runOnce(dir, 400);
  const second = runOnce(dir, 200);
  const tele = lines(join(dir, 'telemetry.jsonl'));
  const boots = tele.filter((l) => l.type === 'boot');
  assert.equal(boots.length, 2);
  assert.notEqual(boots[0].run, boots[1].run);
  assert.equal(boots[1].model, 'fake-moe');
  const swapBoots = lines(join(dir, 'swaps.jsonl')).filter((l) => l.type === 'boot');
  assert.deepEqual(swapBoots.map((b) => b.run), boots.map((b) => b.run));
  const live = readLiveRun(dir);
  assert.equal(live.runs, 2);
  assert.equal(live.run, boots[1].run);
  assert.equal(live.drains.length, second.driver.controller.stats.drains);
  assert.equal(live.swaps.length, second.driver.controller.stats.applied);
  const steps = live.drains.map((d) => d.step);
  assert.deepEqual(steps, [...steps].sort((a, b) => a - b), 'one run: steps only go up');
  const a = analyzeLiveRun(live, [100]);
  assert.ok(a.steps > 0 && a.seconds >= 0);
  for (const s of a.shifts) assert.ok(s.t90Steps === null || s.t90Steps >= 0, `T90 ${s.t90Steps}`);
}));
