// A residency driver run on a folder the way a server process runs it, for tests of what a folder keeps across
// restarts: one run of skewed traffic on the fake backend, then close (or not: a kill).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FAKE_GEOMETRY, fakeBackend } from './fake-backend.ts';
import { ResidencyDriver, type ResidencyDriverOptions } from './residency-driver.ts';
import { rng, shuffle, skewedRouting } from '../residency/test-helpers.ts';

const { L, E, K } = FAKE_GEOMETRY;
export const lines = (path: string) => readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l));

/** One process's run: a driver on the folder, `steps` steps of skewed traffic, then close (unless `kill`). */
export function runOnce(dir: string, steps: number, opts: Partial<ResidencyDriverOptions> & { kill?: boolean } = {}) {
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

export function withDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'restarts-'));
  try { body(dir); } finally { rmSync(dir, { recursive: true, force: true }); }
}
