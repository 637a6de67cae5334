// /metrics passes promtool's lint (`promtool check metrics`): promtool itself when it is installed
// (Debian: apt-get install prometheus), and always the same rules, replicated here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer } from '../../src/server/server.ts';
import { defaultServerConfig } from '../../src/server/types.ts';
import { FakeEngine, FakeResidency, fakeModel } from './fakes.ts';
import { post } from './helpers.ts';

/** promtool's lint rules (prometheus/client_golang testutil/promlint) that apply to a text exposition. */
export function lintMetrics(text: string): string[] {
  const problems: string[] = [];
  const types = new Map<string, string>();
  const helps = new Set<string>();
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) types.set(t[1]!, t[2]!);
    const h = /^# HELP (\S+) (.*)$/.exec(line);
    if (h && h[2]!.trim() !== '') helps.add(h[1]!);
  }
  const units = /_(milliseconds|microseconds|nanoseconds|minutes|hours|days|weeks|kilobytes|megabytes|gigabytes|kilometers|percent)(_|$)/;
  for (const [name, type] of types) {
    if (!helps.has(name)) problems.push(`${name} no help text`);
    if (name !== name.toLowerCase() || /[^a-z0-9_:]/.test(name)) problems.push(`${name} metric names should be written in 'snake_case' not 'camelCase'`);
    if (type === 'counter' && !name.endsWith('_total')) problems.push(`${name} counter metrics should have "_total" suffix`);
    if (type !== 'counter' && name.endsWith('_total')) problems.push(`${name} non-counter metrics should not have "_total" suffix`);
    if (units.test(name)) problems.push(`${name} use base unit instead of a prefixed or non-base one`);
    if (/_count$|_sum$|_bucket$/.test(name)) problems.push(`${name} metric names should not end in _count, _sum or _bucket`);
  }
  for (const line of text.split('\n')) {
    const l = /^[a-zA-Z_:][a-zA-Z0-9_:]*\{(.*)\} /.exec(line);
    if (!l) continue;
    for (const m of l[1]!.matchAll(/([^=,]+)="/g)) if (/[A-Z]/.test(m[1]!)) problems.push(`${line.split('{')[0]} label names should be written in 'snake_case' not 'camelCase'`);
  }
  return problems;
}

test('/metrics is promtool-clean, process metrics included', async () => {
  const s = await startServer({ engine: new FakeEngine(), model: fakeModel, residency: new FakeResidency(), config: defaultServerConfig }, { port: 0, host: '127.0.0.1' });
  try {
    await post(`${s.url}/v1/completions`, { prompt: 'abc', max_tokens: 3 });
    const text = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(text, /residency_process_nodejs_heap_size_total_bytes/, 'process metrics are on');
    assert.deepEqual(lintMetrics(text), []);
    const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (promtool.error) return; // not installed here: the rules above stand in for it
    assert.equal(promtool.status, 0, `promtool: ${promtool.stdout}${promtool.stderr}`);
    assert.equal(`${promtool.stdout}${promtool.stderr}`.trim(), '');
  } finally {
    await s.close();
  }
});

test('the replicated rules find what promtool finds', () => {
  const text = '# HELP a_total x\n# TYPE a_total gauge\na_total 1\n# HELP b x\n# TYPE b counter\nb 1\n# TYPE c_milliseconds gauge\nc_milliseconds 1\n';
  assert.deepEqual(lintMetrics(text), [
    'a_total non-counter metrics should not have "_total" suffix',
    'b counter metrics should have "_total" suffix',
    'c_milliseconds no help text',
    'c_milliseconds use base unit instead of a prefixed or non-base one',
  ]);
});
