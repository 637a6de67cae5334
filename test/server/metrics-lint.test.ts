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

/**
 * What `promtool check metrics` reports (none where promtool is not installed: the rules above stand in for it), less
 * its one complaint about vLLM's names: the `vllm:` colon is theirs, and routers (the Gateway API inference extension's
 * endpoint picker) read them so; promtool reserves colons for recording rules.
 */
function promtoolProblems(text: string): string[] {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error) return [];
  return `${r.stdout}${r.stderr}`.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !/^vllm:\S+ metric names should not contain ':'$/.test(l));
}

test('/metrics is promtool-clean, process metrics included', async () => {
  const s = await startServer({ engine: new FakeEngine(), model: fakeModel, residency: new FakeResidency(), config: defaultServerConfig }, { port: 0, host: '127.0.0.1' });
  try {
    await post(`${s.url}/v1/completions`, { prompt: 'abc', max_tokens: 3 });
    const text = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(text, /residency_process_nodejs_heap_size_total_bytes/, 'process metrics are on');
    assert.deepEqual(lintMetrics(text), []);
    assert.deepEqual(promtoolProblems(text), []);
  } finally {
    await s.close();
  }
});

test('vLLM\'s names carry the engine\'s figures (running, waiting, KV usage, prefix cache, preemptions), promtool-clean', async () => {
  const engine = new FakeEngine();
  const kv = { numBlocks: 100, blockSize: 16, dtype: 'bfloat16' as const, bytesPerBlock: 4096, freeBlocks: 75, cachedFreeBlocks: 10, usage: 0.25, prefixCaching: true, prefixQueries: 640, prefixHits: 512, preemptions: 3 };
  Object.defineProperties(engine, { kvCache: { get: () => kv }, kvCacheUsage: { get: () => kv.usage }, preemptions: { get: () => kv.preemptions } });
  const s = await startServer({ engine, model: fakeModel, config: defaultServerConfig }, { port: 0, host: '127.0.0.1' }, { defaultMetrics: false });
  try {
    const text = await (await fetch(`${s.url}/metrics`)).text();
    assert.deepEqual(lintMetrics(text), []);
    const m = 'model_name="fake-moe"';
    for (const [name, value] of [['vllm:num_requests_running', 0], ['vllm:num_requests_waiting', 0], ['vllm:kv_cache_usage_perc', 0.25],
      ['vllm:prefix_cache_queries_total', 640], ['vllm:prefix_cache_hits_total', 512], ['vllm:num_preemptions_total', 3]] as const) {
      assert.match(text, new RegExp(`^${name}\\{${m}\\} ${value}$`, 'm'), name);
    }
    assert.match(text, /^# TYPE vllm:prefix_cache_hits_total counter$/m);
    assert.match(text, /^# TYPE vllm:kv_cache_usage_perc gauge$/m);
  } finally {
    await s.close();
  }
});

test('with the host expert lane: its requests, busy time, split and layer times, promtool-clean', async () => {
  let requests = 0;
  const hostLane = {
    stats: () => ({
      requests: (requests += 10), busyMs: requests * 0.12,
      split: { parts: 4, take: [0, 3, 4, 9, 12, 12, 16, 20, 20, ...new Array<number>(24).fill(24)], layerUs: [null, 120, 182, null, ...new Array<number>(29).fill(400)], hostLayers: 40, meanWaitUs: 12.5, splitLayers: 30, meanUnitsWaitUs: 3.5 },
    }),
  };
  const s = await startServer({ engine: new FakeEngine(), model: fakeModel, config: defaultServerConfig, hostLane }, { port: 0, host: '127.0.0.1' }, { defaultMetrics: false });
  try {
    const text = await (await fetch(`${s.url}/metrics`)).text();
    assert.deepEqual(lintMetrics(text), []);
    assert.match(text, /^residency_host_lane_requests_total\{model_name="fake-moe"\} 10$/m);
    assert.match(text, /^residency_host_lane_take\{cold_experts="2",model_name="fake-moe"\} 1$/m);
    assert.match(text, /^residency_host_lane_take\{cold_experts="3",model_name="fake-moe"\} 2\.25$/m, 'in experts: 9 quarters');
    assert.match(text, /^residency_host_lane_take\{cold_experts="4",model_name="fake-moe"\} 3$/m);
    assert.doesNotMatch(text, /cold_experts="17"/, 'the first 16 counts shown');
    assert.match(text, /^residency_host_lane_layer_seconds\{cold_experts="2",model_name="fake-moe"\} 0\.000182$/m);
    assert.doesNotMatch(text, /residency_host_lane_layer_seconds\{cold_experts="3"/, 'a count not measured is not shown');
    assert.match(text, /^residency_host_lane_gpu_wait_seconds\{model_name="fake-moe"\} 0\.0000125$/m);
    assert.match(text, /^residency_host_lane_units_wait_seconds\{model_name="fake-moe"\} 0\.0000035$/m);
    const again = await (await fetch(`${s.url}/metrics`)).text();
    const count = Number(/^residency_host_lane_requests_total\{model_name="fake-moe"\} (\d+)$/m.exec(again)?.[1]);
    assert.ok(count > 10, `the counter follows the lane's count (${count})`);
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
