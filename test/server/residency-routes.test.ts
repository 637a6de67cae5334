// /v1/residency, /v1/residency/control, /v1/residency/stats and /metrics against a fake residency system.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeResidency } from './fakes.ts';
import { post, startTestServer } from './helpers.ts';
import type { TestServer } from './helpers.ts';

describe('residency routes (fake residency)', () => {
  let s: TestServer;
  const residency = new FakeResidency();
  before(async () => { s = await startTestServer({ residency }); });
  after(async () => { await s.close(); });

  test('GET /v1/residency: map, geometry, cold share, swaps, controller', async () => {
    const j = await (await fetch(`${s.url}/v1/residency`)).json();
    assert.deepEqual(j.geometry, { layers: 2, experts: 8, hot_per_layer: 6 });
    assert.equal(j.map.layers_map.length, 2);
    assert.equal(j.cold_share.window, 0.05);
    assert.deepEqual(j.swaps, { applied: 0, refused: 0, superseded: 0, queued: 0, in_flight: 0 });
    assert.deepEqual(j.controller, { frozen: false, counting: true });
  });

  test('control: accepted commands apply; rejected ones change nothing and name the problem', async () => {
    let r = await post(`${s.url}/v1/residency/control`, { freeze: true });
    assert.equal(r.status, 200);
    assert.equal((await r.json()).controller.frozen, true);
    assert.equal(residency.frozen, true);
    r = await post(`${s.url}/v1/residency/control`, { counting: false, bogus: 1 });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error.message, /bogus/);
    assert.equal(residency.counting, true);
    r = await post(`${s.url}/v1/residency/control`, '{"freeze": fals');
    assert.equal(r.status, 400);
    assert.equal(residency.frozen, true);
  });

  test('control over HTTP may dump counts only as a plain name in the residency folder, none of its own files; a refused dump changes nothing', async () => {
    for (const path of ['/etc/passwd', '../counts.json', 'a/../../b.json', 'sub/counts.json', 'swaps.jsonl', 'telemetry.jsonl', 'steps.json', 'control.json', 'GO']) {
      const r = await post(`${s.url}/v1/residency/control`, { freeze: false, dump_counts: path });
      assert.equal(r.status, 400, path);
      const err = (await r.json()).error;
      assert.equal(err.param, 'dump_counts');
      assert.equal(residency.frozen, true, 'the refused command changed nothing');
    }
  });

  test('stats: hot mask, expert use, history samples', async () => {
    s.history.sample();
    const j = await (await fetch(`${s.url}/v1/residency/stats`)).json();
    assert.equal(j.hot[0].filter(Boolean).length, 6);
    assert.equal(j.hot[0][7], false);
    assert.equal(j.expert_use[1][7], 16);
    assert.ok(j.history.length >= 2);
  });

  test('metrics: requests, tokens, latency histograms, cold share per layer, swaps, queue depth', async () => {
    await post(`${s.url}/v1/completions`, { prompt: 'abc', max_tokens: 4 });
    residency.applied = 3;
    const text = await (await fetch(`${s.url}/metrics`)).text();
    const m = 'model_name="fake-moe"';
    await fetch(`${s.url}/no/such/path`);
    const after404 = await (await fetch(`${s.url}/metrics`)).text();
    for (const line of [
      new RegExp(`residency_requests_total\\{endpoint="/v1/completions",status="200",${m}\\} \\d+`),
      new RegExp(`residency_requests_total\\{endpoint="other",status="404",${m}\\} 1`),
      new RegExp(`residency_completion_tokens_total\\{${m}\\} \\d+`),
      new RegExp(`residency_prompt_tokens_total\\{${m}\\} \\d+`),
      new RegExp(`residency_time_to_first_token_seconds_count\\{${m}\\} 1`),
      new RegExp(`residency_inter_token_latency_seconds_count\\{${m}\\} 3`),
      new RegExp(`residency_e2e_request_latency_seconds_count\\{${m}\\} 1`),
      new RegExp(`residency_request_finished_total\\{finished_reason="length",${m}\\} 1`),
      new RegExp(`residency_kv_cache_usage_ratio\\{${m}\\} 0`),
      new RegExp(`residency_cold_share\\{scope="overall",${m}\\} 0.1`),
      new RegExp(`residency_cold_share_layer\\{layer="1",${m}\\} 0.02`),
      new RegExp(`residency_swaps_applied_total\\{${m}\\} 3`),
      new RegExp(`residency_swaps_superseded_total\\{${m}\\} 0`),
      new RegExp(`residency_queue_depth\\{${m}\\} 0`),
    ]) assert.match(after404, line);
    assert.ok(text.length > 0);
  });
});

test('without a residency system, /v1/residency answers 503 and generation still works', async () => {
  const s = await startTestServer({ residency: null });
  try {
    const r = await fetch(`${s.url}/v1/residency`);
    assert.equal(r.status, 503);
    assert.equal((await r.json()).error.code, 'residency_unavailable');
    assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 2 })).status, 200);
  } finally { await s.close(); }
});
