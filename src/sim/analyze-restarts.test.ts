// A residency folder reused across restarts, read back: every run starts each .jsonl with a boot record, and the
// live-run analysis reads the last run only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { lines, runOnce, withDir } from '../engine/driver-run-test-helpers.ts';
import { analyzeLiveRun, readLiveRun } from './analyze.ts';

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
