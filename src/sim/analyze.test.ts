import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { drainLine, swapLine, StepRing } from '../residency/telemetry.ts';
import { TelemetryWriter } from '../residency/telemetry-writer.ts';
import { analyzeLiveRun, readLiveRun } from './analyze.ts';
import { loadTraces, FIXTURE_TRACES } from './traces/load.ts';
import { buildTraffic, parsePhases } from './traffic.ts';
import { topHMap, traceCounts } from './fit.ts';
import { adaptivePolicy } from './policies/adaptive.ts';
import type { Geometry } from './policies/policy.ts';
import { replay } from './replay.ts';

/** A residency folder as a live run would write it, from a simulated run at 5 ms per step (10 ms with swaps). */
function simulatedRunDir(): { dir: string; shift: number } {
  const set = loadTraces(FIXTURE_TRACES, { only: ['en', 'de', 'ja'] });
  const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
  const boot = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
  const steps = buildTraffic(set, { phases: parsePhases('en:2000,de+ja:3000', set), users: 1, seed: 1, countTmax: 256 });
  const policy = adaptivePolicy()({ geometry: g, bootMap: boot, steps });
  const r = replay(policy, steps);
  const dir = mkdtempSync(join(tmpdir(), 'analyze-'));
  const w = new TelemetryWriter(dir);
  const ring = new StepRing(8192);
  const t0 = Date.parse('2025-11-30T00:00:00Z');
  const clock: number[] = [];
  let ms = 0;
  for (let s = 0; s < r.steps; s++) { ms += r.swaps[s] ? 10 : 5; clock.push(ms); ring.push(s, 5e6, 1, r.swaps[s]!, r.swaps[s] ? 5e6 : 0); }
  for (const d of policy.drains) w.drain(drainLine(d, new Date(t0 + clock[d.step]!)));
  w.swaps(policy.log.map(({ step, swap }) => swapLine(swap, step, 1000, new Date(t0 + clock[step]!))));
  w.steps(ring.dump());
  return { dir, shift: 2000 };
}

describe('analyze', () => {
  const { dir, shift } = simulatedRunDir();
  it('finds the shift, its peak and T90, swaps per minute and swap-step percentiles', () => {
    const a = analyzeLiveRun(readLiveRun(dir));
    assert.equal(a.steps, 4991); // the last drain ran after step 4991 (0-based)
    assert.ok(a.shifts.some((s) => Math.abs(s.step - shift) <= 128), `a shift detected near ${shift}: ${JSON.stringify(a.shifts.map((s) => s.step))}`);
    const marked = analyzeLiveRun(readLiveRun(dir), [shift]);
    const s = marked.shifts[0]!;
    assert.equal(s.how, 'marked');
    assert.ok(s.peak > 0.05 && s.converged < 0.04, `peak ${s.peak}, converged ${s.converged}`);
    assert.ok(s.t90Steps !== null && s.t90Steps > 0 && s.t90Steps < 2500, `T90 ${s.t90Steps}`);
    assert.ok(s.t90Seconds !== null && s.t90Seconds > 0);
    assert.ok(marked.swapsApplied > 0 && marked.swapsPerMinute > 0);
    assert.equal(marked.swapsRefused, 0);
    assert.ok(marked.swapSteps!.count === marked.swapsApplied || marked.swapSteps!.count > 0);
    assert.equal(marked.swapSteps!.p50Ms, 10);
    assert.equal(marked.swapFreeSteps!.p99Ms, 5);
  });
  it('skips and names (file, line, field) a bad line instead of refusing the run; a missing folder is still an error', () => {
    const bad = mkdtempSync(join(tmpdir(), 'analyze-bad-'));
    const good = (step: number) => `{"v":1,"time":"2025-11-30T00:00:0${step % 10}Z","step":${step},"window_steps":64,"picks":384,"cold_share":0.1,"swaps_applied":0,"swaps_refused":0}\n`;
    // A write cut short by a full disk, joined by the next append, then a line with a bad field.
    writeFileSync(join(bad, 'telemetry.jsonl'), `${good(64)}{"v":1,"time":"2025-11-3${good(128)}{"v":1,"time":"2025-11-30T00:00:00Z","step":192,"window_steps":64,"picks":384,"cold_share":"high","swaps_applied":0,"swaps_refused":0}\n${good(256)}`);
    const live = readLiveRun(bad);
    assert.deepEqual(live.drains.map((d) => d.step), [64, 256]);
    assert.equal(live.broken.length, 2);
    assert.match(live.broken[0]!.where, /telemetry\.jsonl:2$/);
    assert.match(live.broken[0]!.why, /not JSON/);
    assert.match(live.broken[1]!.where, /telemetry\.jsonl:3$/);
    assert.match(live.broken[1]!.why, /field 'cold_share' must be a number/);
    assert.equal(analyzeLiveRun(live).drains, 2);
    assert.throws(() => readLiveRun(join(bad, 'nope')), (e: unknown) => e instanceof ResidencyError && /no telemetry\.jsonl/.test(e.message));
  });
});
