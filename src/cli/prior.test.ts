// --prior COUNTS.json on serve, generate and simulate: a dump of another geometry or model is refused with the
// flag named before anything is served; a matching one reaches the controller.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { saveCountsDump } from '../residency/files.ts';
import { generateCommand } from './generate.ts';
import { FIXTURE_TRACES } from '../sim/traces/load.ts';
import { simulateCommand } from './simulate.ts';
import { withServe } from './serve-child.ts';

// The packaged fixture checkpoint: tiny-moe, 6 layers x 64 experts.
function dumpFile(dir: string, name: string, model: string, layers: number, experts: number): string {
  const rows = Array.from({ length: layers }, (_, l) => Array.from({ length: experts }, (_, e) => (e * 7 + l) % 11));
  const path = join(dir, name);
  saveCountsDump(path, { version: 1, model, step: 100, decode_steps: 100, half_life: 500, decayed: rows, cumulative: rows });
  return path;
}

const dir = mkdtempSync(join(tmpdir(), 'prior-cli-'));
const good = dumpFile(dir, 'good.json', 'tiny-moe', 6, 64);
const wrongGeometry = dumpFile(dir, 'wrong.json', 'tiny-moe', 6, 32);
const wrongModel = dumpFile(dir, 'other.json', 'other-moe', 6, 64);
test.after(() => rmSync(dir, { recursive: true, force: true }));

test('serve --prior with a dump of another geometry or model exits 1 naming --prior, before serving', () => {
  for (const [file, re] of [
    [wrongGeometry, /\[BAD_COUNTS\] --prior \S*wrong\.json: the dump is 6 layers x 32 experts but the model tiny-moe has 6 x 64/],
    [wrongModel, /\[BAD_COUNTS\] --prior \S*other\.json: the dump is of model 'other-moe', expected 'tiny-moe'/],
  ] as const) {
    const r = spawnSync(process.execPath, ['bin/residency.js', 'serve', '--port', '0', '--hot', '49', '--prior', file], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, re);
    assert.doesNotMatch(r.stderr, /serving /);
  }
});

test('serve --prior with a matching dump: the controller has the prior (GET /v1/residency)', () =>
  withServe(['--port', '0', '--hot', '49', '--prior', good], async ({ child, url, stderr, exited }) => {
    assert.match(stderr, /seed prior from --prior \S*good\.json: 1 pseudo-picks per expert/);
    const snap = await (await fetch(`${url}/v1/residency`)).json() as { controller: { prior: boolean; budgets: { prior_picks_per_expert: number } } };
    assert.equal(snap.controller.prior, true);
    assert.equal(snap.controller.budgets.prior_picks_per_expert, 1);
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  }));

test('generate --prior: refused without --residency-dir and for another geometry; a matching dump reaches the controller', async () => {
  const base = ['--prompt-ids', '1,2,3', '--max-tokens', '2', '--hot', '49'];
  await assert.rejects(generateCommand.run([...base, '--prior', good]),
    (e: unknown) => e instanceof ResidencyError && /--prior needs --residency-dir/.test(e.message));
  const res = join(dir, 'gen');
  await assert.rejects(generateCommand.run([...base, '--residency-dir', res, '--prior', wrongGeometry]),
    (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_COUNTS' && /--prior \S*wrong\.json: the dump is 6 layers x 32/.test(e.message));
  const logged: string[] = [];
  const [log, err] = [console.log, console.error];
  console.log = () => {};
  console.error = (...a: unknown[]) => { logged.push(a.join(' ')); };
  const write = process.stdout.write.bind(process.stdout);
  const writeErr = process.stderr.write.bind(process.stderr);
  process.stdout.write = (() => true) as typeof process.stdout.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    assert.equal(await generateCommand.run([...base, '--residency-dir', res, '--prior', good]), 0);
  } finally {
    [console.log, console.error] = [log, err];
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
  assert.ok(logged.some((m) => /seed prior from --prior \S*good\.json/.test(m)), logged.join('\n'));
});

test('simulate --prior: checked against the traces geometry; a matching dump changes adaptive decisions', async () => {
  const sim = async (extra: string[]) => {
    const lines: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => { lines.push(a.join(' ')); };
    try { await simulateCommand.run(['--traces', FIXTURE_TRACES, '--phases', 'en+code:400,de+ja:400', '--fit', 'en+code', '--policy', 'adaptive', '--profile', 'h200-pcie', '--json', ...extra]); } finally { console.log = log; }
    return JSON.parse(lines.join('\n')) as { swaps: number; coldShare: number };
  };
  await assert.rejects(sim(['--prior', wrongGeometry]), /--prior \S*wrong\.json: the dump is 6 layers x 32 experts but the traces have 6 x 64/);
  // Traces carry no model name: only the geometry is checked, so another model's name is accepted here.
  const plain = await sim([]);
  const withPrior = await sim(['--prior', wrongModel]);
  assert.notDeepEqual([withPrior.swaps, withPrior.coldShare], [plain.swaps, plain.coldShare]);
});
