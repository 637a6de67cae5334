// The simulator's commands end to end (simulate, compare, analyze), run in-process on short fixture protocols.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { FIXTURE_TRACES } from '../sim/traces/load.ts';
import { openTraceFile } from '../sim/traces/recorder.ts';
import { analyzeCommand } from './analyze.ts';
import { compareCommand } from './compare.ts';
import { simulateCommand } from './simulate.ts';

async function captured(fn: () => Promise<unknown>): Promise<string> {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...a: unknown[]) => { lines.push(a.join(' ')); };
  try { await fn(); } finally { console.log = log; }
  return lines.join('\n');
}

describe('residency simulate / compare', () => {
  it('simulate --json prints per-phase cold share, T90, swaps and modelled tok/s', async () => {
    const out = await captured(() => simulateCommand.run(['--traces', FIXTURE_TRACES, '--phases', 'en+code:400,de+ja:400', '--fit', 'en+code', '--policy', 'static', '--profile', 'h200-pcie', '--json']));
    const r = JSON.parse(out);
    assert.equal(r.policy, 'static');
    assert.equal(r.phases.length, 2);
    assert.ok(r.phases[1].coldShare > r.phases[0].coldShare);
    assert.ok(r.phases[1].byProfile['h200-pcie'].tokPerSec > 0);
    assert.equal(r.phases[0].t90Steps, null);
  });

  it('compare writes a markdown table, JSON and an SVG chart', async () => {
    const out = mkdtempSync(join(tmpdir(), 'compare-'));
    const text = await captured(() => compareCommand.run(['--traces', FIXTURE_TRACES, '--phases', 'en:300,de+ja:300', '--fit', 'en', '--policies', 'adaptive,static,lru,oracle', '--out', out]));
    assert.match(text, /\| adaptive \| 2: de\+ja \|/);
    for (const f of ['compare.md', 'compare.json', 'coldshare.svg']) assert.ok(existsSync(join(out, f)), f);
    assert.match(readFileSync(join(out, 'coldshare.svg'), 'utf8'), /^<svg[^]*<polyline[^]*oracle[^]*<\/svg>\n$/);
    assert.equal(JSON.parse(readFileSync(join(out, 'compare.json'), 'utf8')).reports.length, 4);
  });

  it('replays an engine-recorded trace step for step with --phases recorded', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'rec-')), 'run.jsonl');
    const { recorder, close } = openTraceFile(file, { layers: 2, experts: 8, topK: 2 });
    for (let s = 0; s < 100; s++) recorder.recordStep([{ seq: 0, startPos: s, tokens: 1 }], Int32Array.from([s % 8, (s + 1) % 8, 7, 6]));
    close();
    const r = JSON.parse(await captured(() => simulateCommand.run(['--traces', file, '--phases', 'recorded', '--hot', '4', '--policy', 'static', '--json'])));
    assert.equal(r.steps, 100);
    // Experts 0..3 hot: layer 1 always cold (7, 6); in layer 0, s % 8 is 4..7 in 48 steps, (s + 1) % 8 in 49.
    assert.equal(r.coldShare, (200 + 48 + 49) / 400);
  });

  it('takes any adaptive budget with --budgets, as a control file gives it: a move budget of 1 a layer a drain moves fewer', async () => {
    const run = async (...extra: string[]) => JSON.parse(await captured(() => simulateCommand.run(['--traces', FIXTURE_TRACES, '--phases', 'en+code:400,de+ja:400', '--fit', 'en+code', '--policy', 'adaptive', '--profile', 'h200-pcie', '--json', ...extra])));
    // (drain 64: at the default drain 16 two moves a layer a drain rarely bind on the fixture)
    const base = await run('--drain-every', '64'), one = await run('--budgets', '{"drain_every":64,"swaps_per_layer_per_drain":1}');
    assert.ok(one.swaps < base.swaps, `${one.swaps} swaps at 1 a layer a drain, ${base.swaps} at 2`);
    assert.deepEqual(await run('--drain-every', '32'), await run('--budgets', '{"drain_every":32}'), 'the same budget by flag or JSON');
  });

  it('rejects bad flags with a named error', async () => {
    await assert.rejects(simulateCommand.run(['--phases', 'en:10']), /--traces DIR\|FILE is required/);
    const t = ['--traces', FIXTURE_TRACES];
    await assert.rejects(simulateCommand.run([...t, '--policy', 'nope']), (e: unknown) => e instanceof ResidencyError && /--policy: unknown 'nope'/.test(e.message));
    await assert.rejects(simulateCommand.run([...t, '--hot', '64']), /--hot must be an integer in 1\.\.63/);
    await assert.rejects(simulateCommand.run([...t, '--phases', 'en:10,klingon:5']), /no trace 'klingon'/);
    await assert.rejects(simulateCommand.run([...t, '--profile', 'tpu']), /--profile: unknown 'tpu'/);
    await assert.rejects(simulateCommand.run([...t, '--budgets', '{"drain_every":0}']), /--budgets\.drain_every: /);
    await assert.rejects(simulateCommand.run([...t, '--budgets', '{"drains":4}']), /--budgets: .*drains/);
    await assert.rejects(simulateCommand.run([...t, '--budgets', 'drain 4']), /--budgets: expected a JSON object of budgets/);
    await assert.rejects(analyzeCommand.run(['--residency-dir', join(tmpdir(), 'no-such-residency-dir')]), /no telemetry\.jsonl/);
  });
});
