// A residency folder on a full disk (issue 46 item 2): a small tmpfs, filled while the driver runs. Failed
// appends leave no half line for later ones to join, drops are counted (drain lines, then /metrics), analyze
// reads the run, and swaps.jsonl still replays to the live map. Needs root (mount); skipped otherwise.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeSync, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rng, shuffle, skewedRouting } from '../residency/test-helpers.ts';
import { readLiveRun, replaySwaps } from './analyze.ts';
import { FAKE_GEOMETRY, fakeBackend } from '../engine/fake-backend.ts';
import { ResidencyDriver } from '../engine/residency-driver.ts';

const { L, E, K } = FAKE_GEOMETRY;

/** A tmpfs of `size` mounted on a fresh folder, or why not (not root, no mount). */
function smallTmpfs(size: string): { dir: string; done: () => void } | string {
  if (process.getuid?.() !== 0) return 'needs root to mount a tmpfs';
  const dir = mkdtempSync(join(tmpdir(), 'full-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'ignore' });
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return 'mount -t tmpfs failed here';
  }
  return { dir, done: () => { try { execFileSync('umount', [dir]); } catch { execFileSync('umount', ['-l', dir]); } rmSync(dir, { recursive: true, force: true }); } };
}

/** Fills the file system holding `dir` to the last byte (a file of whole pages, then single bytes until ENOSPC). */
function fill(dir: string): string {
  const path = join(dir, 'filler');
  const fd = openSync(path, 'a');
  try {
    for (const chunk of [Buffer.alloc(4096), Buffer.alloc(1)]) {
      for (;;) {
        try { writeSync(fd, chunk); } catch { break; }
      }
    }
  } finally {
    closeSync(fd);
  }
  return path;
}

test('a full disk mid-run: no broken line is left in the middle of telemetry.jsonl or swaps.jsonl, drops are counted, analyze reads the run, swaps.jsonl replays to the live map', async (t) => {
  const fs = smallTmpfs('256k');
  if (typeof fs === 'string') return t.skip(fs);
  try {
    const dir = join(fs.dir, 'rd');
    mkdirSync(dir);
    const backend = fakeBackend();
    const logs: string[] = [];
    const driver = new ResidencyDriver({ backend, dir, pollEvery: 1, stepsFlushMs: 0, log: (m) => logs.push(m), frozen: false, budgets: { drain_every: 8, min_average: 1 } });
    const r = rng(11);
    let domain = Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, i) => i)));
    let step = 0;
    const run = (steps: number) => {
      for (let i = 0; i < steps; i++, step++) {
        if (step % 96 === 0) domain = Array.from({ length: L }, () => shuffle(r, Array.from({ length: E }, (_, j) => j)));
        const counted = driver.countStep(1);
        if (counted) backend.counter.addPicks(skewedRouting(r, 1, L, E, K, domain), 1);
        driver.afterStep({ step, tokens: 1, counted, durationNs: 1000 });
      }
    };
    run(300);
    const filler = fill(fs.dir);
    const before = driver.controller.stats.applied;
    run(2000);
    assert.ok(driver.controller.stats.applied > before, 'swaps landed while the disk was full');
    assert.ok(logs.some((m) => /cannot write .*dropping its lines/.test(m)), logs.join('\n'));
    rmSync(filler);
    run(400);
    driver.close();
    await driver.mapSettled(); // a background map write still holds a file there

    for (const name of ['telemetry.jsonl', 'swaps.jsonl']) {
      const text = readFileSync(join(dir, name), 'utf8');
      assert.ok(text.endsWith('\n'), `${name} ends on a whole line`);
      text.split('\n').filter((l) => l !== '').forEach((l, i) => assert.doesNotThrow(() => JSON.parse(l), `${name}:${i + 1} ${l.slice(0, 80)}`));
    }
    const live = readLiveRun(dir);
    assert.deepEqual(live.broken, []);
    const last = live.drains.at(-1)!;
    assert.ok((last.telemetry_lines_dropped ?? 0) > 0 && (last.swap_lines_dropped ?? 0) > 0, `drops counted: ${JSON.stringify(last)}`);
    const replay = replaySwaps(dir);
    assert.equal(replay.inconsistent, 0, 'every swap line names the experts its rows held');
    assert.ok(replay.resyncs >= 1, 'a resync line after the gap');
    assert.deepEqual(replay.map?.layers_map, driver.controller.map().layers_map, 'swaps.jsonl replays to the live map');
  } finally {
    fs.done();
  }
});
