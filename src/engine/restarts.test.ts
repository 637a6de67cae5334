// A residency folder reused across restarts: a leftover control file is not replayed, a control file is
// consumed once, torn lines are cut off, steps.json is flushed as it goes. (Each run's boot record, and analyze
// reading the last run only: src/sim/analyze-restarts.test.ts.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fakeBackend } from './fake-backend.ts';
import { lines, runOnce, withDir } from './driver-run-test-helpers.ts';
import { ResidencyDriver } from './residency-driver.ts';

test('a control.json left from the last run is not replayed at boot: its dump_counts does not overwrite that run\'s dump', () => withDir((dir) => {
  const first = runOnce(dir, 64, { kill: true });
  writeFileSync(join(dir, 'control.json'), JSON.stringify({ dump_counts: 'counts.json' }));
  first.driver.pollControl(); // the first run applies it (and consumes it)
  const dumped = readFileSync(join(dir, 'counts.json'), 'utf8');
  assert.ok(JSON.parse(dumped).cumulative.flat().some((x: number) => x > 0), 'the first run\'s counts');
  assert.ok(!existsSync(join(dir, 'control.json')), 'consumed once applied');
  // Simulate a control file that arrived while no process ran (or an old version that never consumed it).
  writeFileSync(join(dir, 'control.json'), JSON.stringify({ dump_counts: 'counts.json', freeze: true }));
  const { driver, logs } = runOnce(dir, 16);
  assert.equal(readFileSync(join(dir, 'counts.json'), 'utf8'), dumped, 'the last dump is intact');
  assert.equal(driver.controller.frozen, false, 'the leftover command was not applied');
  assert.ok(existsSync(join(dir, 'control.json.stale')) && !existsSync(join(dir, 'control.json')));
  assert.ok(logs.some((m) => /predates this run: not applied/.test(m)), logs.join('\n'));
}));

test('a control file is consumed once applied (control.json.applied) or refused (control.json.rejected), never applied twice', () => withDir((dir) => {
  const backend = fakeBackend();
  const driver = new ResidencyDriver({ backend, dir, log: () => {}, frozen: true });
  writeFileSync(join(dir, 'control.json'), '{"freeze": false}');
  driver.pollControl();
  assert.equal(driver.controller.frozen, false);
  assert.ok(!existsSync(join(dir, 'control.json')));
  assert.equal(readFileSync(join(dir, 'control.json.applied'), 'utf8'), '{"freeze": false}');
  driver.control({ freeze: true });
  driver.pollControl();
  assert.equal(driver.controller.frozen, true, 'not re-read');
  writeFileSync(join(dir, 'control.json'), '{"freeze": "no"}');
  driver.pollControl();
  assert.equal(readFileSync(join(dir, 'control.json.rejected'), 'utf8'), '{"freeze": "no"}');
  writeFileSync(join(dir, 'control.json'), JSON.stringify({ dump_counts: 'swaps.jsonl' })); // parses, refused by the driver
  driver.pollControl();
  assert.match(readFileSync(join(dir, 'control.json.rejected'), 'utf8'), /swaps\.jsonl/);
}));

test('a torn last line (a kill mid-append) is cut off on open and the boot record says how many bytes', () => withDir((dir) => {
  runOnce(dir, 64, { kill: true });
  appendFileSync(join(dir, 'telemetry.jsonl'), '{"v":1,"time":"2025-1');
  appendFileSync(join(dir, 'swaps.jsonl'), '{"v":1,"ti');
  runOnce(dir, 64);
  const tele = lines(join(dir, 'telemetry.jsonl')); // every line parses
  assert.equal(tele.filter((l) => l.type === 'boot').at(-1).torn_bytes_dropped, '{"v":1,"time":"2025-1'.length);
  assert.equal(lines(join(dir, 'swaps.jsonl')).filter((l) => l.type === 'boot').at(-1).torn_bytes_dropped, '{"v":1,"ti'.length);
}));

test('steps.json is flushed while steps run, not only on a clean exit, and names its run', () => withDir((dir) => {
  const { driver } = runOnce(dir, 50, { kill: true, stepsFlushMs: 0 });
  const steps = JSON.parse(readFileSync(join(dir, 'steps.json'), 'utf8'));
  assert.equal(steps.recorded, 50, 'the ring as of the last step, without close()');
  const boot = lines(join(dir, 'telemetry.jsonl')).find((l) => l.type === 'boot');
  assert.equal(steps.run, boot.run);
  assert.ok(!existsSync(join(dir, 'steps.json.tmp')), 'written through a temporary file, renamed');
  void driver;
}));

test('a GO file left from the last run does not start adaptation at boot (set aside as GO.stale, as control.json is); a new GO still does', () => withDir((dir) => {
  writeFileSync(join(dir, 'GO'), '');
  const logs: string[] = [];
  const driver = new ResidencyDriver({ backend: fakeBackend(), dir, log: (m) => logs.push(m), frozen: true });
  driver.pollControl();
  assert.equal(driver.controller.frozen, true, 'the leftover GO did not start adaptation');
  assert.ok(existsSync(join(dir, 'GO.stale')) && !existsSync(join(dir, 'GO')), 'moved aside');
  assert.ok(logs.some((m) => /GO .*predates this run: not applied/.test(m)), logs.join('\n'));
  writeFileSync(join(dir, 'GO'), '');
  driver.pollControl();
  assert.equal(driver.controller.frozen, false, 'a GO written while it runs starts adaptation');
  driver.close();
}));
