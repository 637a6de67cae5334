// The generate command: flags parsed into options (bad ones named), greedy tokens equal the fixture's,
// and --json prints exactly one JSON object on stdout.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { generateOptionsFrom, parseFlags, runGenerate, GENERATE_OPTIONS, GENERATE_HELP } from './generate.ts';
import { tinyMoeFile } from '../../fixtures/fixture-paths.ts';

const opts = (argv: string[]) => generateOptionsFrom(parseFlags(argv, GENERATE_OPTIONS, GENERATE_HELP));

test('flags become options; bad flags are refused by name', () => {
  const o = opts(['--prompt-ids', '1,2,3', '--max-tokens', '5', '--temperature', '0.7', '--top-p', '0.9', '--seed', '4', '--hot', '49', '--json']);
  assert.deepEqual(o.promptIds, [1, 2, 3]);
  assert.deepEqual([o.maxTokens, o.temperature, o.topP, o.seed, o.hot, o.json, o.ignoreEos], [5, 0.7, 0.9, 4, 49, true, false]);
  assert.match(o.modelDir, /models[/\\]tiny-moe$/);
  assert.throws(() => opts(['--prompt', 'x', '--bogus']), /Unknown option '--bogus'/);
  assert.throws(() => opts(['--max-tokens', '3']), /exactly one of --prompt/);
  assert.throws(() => opts(['--prompt', 'a', '--prompt-ids', '1']), /exactly one of --prompt/);
  assert.throws(() => opts(['--prompt-ids', '1,x']), /--prompt-ids 'x'/);
  assert.throws(() => opts(['--prompt', 'a', '--max-tokens', '0']), /--max-tokens '0': expected an integer >= 1/);
  assert.throws(() => opts(['--prompt', 'a', '--top-p', '1.5']), /--top-p/);
  assert.throws(() => opts(['--prompt', 'a', '--temperature', '-1']), /--temperature/);
});

test('greedy generate reproduces the fixture continuation', async () => {
  const c = (JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: { prompt_ids: number[]; steps: { token: number }[] }[] }).cases[3]!;
  const r = await runGenerate({ ...opts(['--prompt-ids', c.prompt_ids.join(','), '--max-tokens', '12', '--hot', '49']), ignoreEos: true }, {});
  assert.deepEqual(r.tokens, c.steps.slice(0, 12).map((s) => s.token));
  assert.equal(r.reason, 'length');
  assert.equal(r.decode.tokens, 11);
  assert.ok(r.prefill.seconds > 0 && r.decode.seconds > 0);
});

test('--json prints exactly one JSON object on stdout', () => {
  const r = spawnSync(process.execPath, ['bin/residency.js', 'generate', '--prompt', 'The ls command', '--max-tokens', '4', '--json'], {
    encoding: 'utf8',
    env: { ...process.env, RESIDENCY_FROM_SOURCE: '1' },
  });
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.length, 1);
  const out = JSON.parse(lines[0]!) as { prompt_ids: number[]; tokens: number[]; text: string };
  assert.deepEqual(Object.keys(out), ['prompt_ids', 'tokens', 'text']);
  assert.ok(out.prompt_ids.length > 0 && out.tokens.length >= 1 && out.tokens.length <= 4);
  assert.match(r.stderr, /prefill: \d+ tokens .* decode: \d+ tokens/);
});

test('--record-trace writes the routing the engine saw, one row per fed token, readable by the simulator', async () => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { readJsonlTrace } = await import('../sim/traces/jsonl.ts');
  const dir = mkdtempSync(join(tmpdir(), 'trace-'));
  try {
    const file = join(dir, 'run.jsonl');
    const r = await runGenerate({ ...opts(['--prompt', 'The ls command', '--max-tokens', '6', '--record-trace', file]), ignoreEos: true }, {});
    const trace = readJsonlTrace(file);
    // Every token fed to the model: the prompt, then each generated token but the last.
    assert.equal(trace.tokens, r.promptIds.length + r.tokens.length - 1);
    assert.equal(trace.ids.length, trace.tokens * 6 * 6);
    for (const id of trace.ids) assert.ok(id >= 0 && id < 64);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a run that fails (a refused hook, a failing step) still disposes its backend', async () => {
  for (const failing of ['hook', 'step'] as const) {
    let disposed = 0;
    const run = runGenerate(opts(['--prompt-ids', '1,2,3', '--max-tokens', '3', '--hot', '49']), {
      hookFactory: (backend) => {
        const dispose = backend.dispose.bind(backend);
        backend.dispose = () => { disposed++; dispose(); };
        if (failing === 'hook') throw new Error('no cold bank here');
        return { countStep: () => true, afterStep: () => { throw new Error('drain failed'); } };
      },
    });
    await assert.rejects(run, failing === 'hook' ? /no cold bank here/ : /drain failed/);
    assert.equal(disposed, 1, `${failing}: disposed once`);
  }
});
