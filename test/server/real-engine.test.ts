// The server on the real engine and the shipped tiny model (CPU): greedy completions equal the model's
// greedy output, streaming delivers the same text, and HTTP control changes the live controller exactly
// as the control file does (a rejected command changes nothing).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createCpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { generateGreedy } from '../../src/engine/complete.ts';
import type { ResidencyDriver } from '../../src/engine/residency-driver.ts';
import { loadModel, type LoadedModel } from '../../src/model/load.ts';
import { startServing, type Serving } from '../../src/server/boot.ts';
import { post, readSse, sseText } from './helpers.ts';
import { tinyMoeFile } from '../../fixtures/fixture-paths.ts';

const MODEL_DIR = resolve(process.cwd(), 'models/tiny-moe');
const quiet = () => {};

let model: LoadedModel;
before(async () => { model = await loadModel(MODEL_DIR); });

/** The model's greedy tokens straight from a backend (no engine, no server), as text without EOS. */
function referenceText(promptIds: readonly number[], n: number): string {
  const backend = createCpuBackend(model.spec, model.weights);
  try {
    const ids = generateGreedy(backend, promptIds, n).filter((t) => !model.tokenizer.eosTokenIds.includes(t));
    return model.tokenizer.decode(ids);
  } finally { backend.dispose(); }
}

describe('greedy completions on the real engine', () => {
  let s: Serving;
  before(async () => { s = await startServing({ modelDir: MODEL_DIR, model, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: quiet }); });
  after(async () => { await s.close(); });

  test('token-id prompts from the parity set: HTTP text == backend greedy text, streamed or not', async () => {
    const cases = (JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: { domain: string; prompt_ids: number[] }[] }).cases;
    for (const c of [cases[0]!, cases[7]!, cases[13]!]) {
      const want = referenceText(c.prompt_ids, 24);
      const body = { prompt: c.prompt_ids, max_tokens: 24, temperature: 0, ignore_eos: true };
      const j = await (await post(`${s.server.url}/v1/completions`, body)).json();
      assert.equal(j.choices[0].text, want, `${c.domain}: non-streamed`);
      assert.equal(j.usage.completion_tokens, 24);
      assert.equal(j.usage.prompt_tokens, c.prompt_ids.length);
      const { chunks, done } = await readSse(await post(`${s.server.url}/v1/completions`, { ...body, stream: true }));
      assert.ok(done);
      assert.equal(sseText(chunks), want, `${c.domain}: streamed`);
    }
  });

  test('the paged KV pool: a repeated prompt hits the prefix cache with the same text; /metrics and /v1/residency show the pool', async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 8000);
    const body = { prompt, max_tokens: 8, temperature: 0, ignore_eos: true };
    const before = s.engine.kvCache!;
    const first = (await (await post(`${s.server.url}/v1/completions`, body)).json()).choices[0].text;
    const again = (await (await post(`${s.server.url}/v1/completions`, body)).json()).choices[0].text;
    assert.equal(again, first, 'a prefix hit gives the same text');
    assert.equal(first, referenceText(prompt, 8));
    const kv = s.engine.kvCache!;
    assert.equal(kv.prefixHits - before.prefixHits, 32, 'the second request found its first two blocks of 16 cached');
    assert.equal(kv.prefixQueries - before.prefixQueries, 80);
    const text = await (await fetch(`${s.server.url}/metrics`)).text();
    const m = 'model_name="tiny-moe"';
    assert.match(text, new RegExp(`^vllm:prefix_cache_hits_total\\{${m}\\} ${kv.prefixHits}$`, 'm'));
    assert.match(text, new RegExp(`^vllm:prefix_cache_queries_total\\{${m}\\} ${kv.prefixQueries}$`, 'm'));
    assert.match(text, new RegExp(`^vllm:num_requests_running\\{${m}\\} 0$`, 'm'));
    assert.match(text, new RegExp(`^vllm:num_requests_waiting\\{${m}\\} 0$`, 'm'));
    assert.match(text, new RegExp(`^vllm:kv_cache_usage_perc\\{${m}\\} 0$`, 'm'), 'nothing held between requests');
    assert.match(text, new RegExp(`^vllm:num_preemptions_total\\{${m}\\} 0$`, 'm'));
    const r = await (await fetch(`${s.server.url}/v1/residency`)).json();
    assert.deepEqual(
      [r.kv_cache.blocks, r.kv_cache.block_size, r.kv_cache.dtype, r.kv_cache.free_blocks, r.kv_cache.prefix_caching, r.kv_cache.prefix_hits],
      [kv.numBlocks, 16, 'float32', kv.numBlocks, true, kv.prefixHits],
    );
    assert.ok(r.kv_cache.cached_free_blocks >= 2, 'the prompt\'s full blocks stay cached after it ended');
  });

  test('text prompts and chat go through the tokenizer and the plain template', async () => {
    const want = referenceText(model.tokenizer.encode('The ls command'), 12);
    const j = await (await post(`${s.server.url}/v1/completions`, { prompt: 'The ls command', max_tokens: 12, temperature: 0, ignore_eos: true })).json();
    assert.equal(j.choices[0].text, want);
    const chatWant = referenceText(model.tokenizer.encode('user: hello\n\nassistant:'), 8);
    const c = await (await post(`${s.server.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, temperature: 0, ignore_eos: true })).json();
    assert.equal(c.choices[0].message.content, chatWant);
  });

  test('concurrent greedy requests (continuous batching) give each its own greedy text', async () => {
    const prompts = ['grep searches', 'Die Datei', 'def main():', 'ファイル'];
    const got = await Promise.all(prompts.map(async (p) => (await (await post(`${s.server.url}/v1/completions`, { prompt: p, max_tokens: 10, temperature: 0, ignore_eos: true })).json()).choices[0].text));
    prompts.forEach((p, i) => assert.equal(got[i], referenceText(model.tokenizer.encode(p), 10), p));
  });

  test('a client closing its stream frees its place in the running batch', async () => {
    const ac = new AbortController();
    const r = await fetch(`${s.server.url}/v1/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'The ls command', max_tokens: 1500, stream: true, ignore_eos: true }) });
    const reader = r.body!.getReader();
    await reader.read();
    assert.equal(s.engine.running, 1);
    ac.abort();
    // Wait (bounded by steps, not by a clock) for the engine to drop the sequence: without the cancel it
    // would run for 1500 more steps.
    for (let i = 0; i < 500 && s.engine.running > 0; i++) await new Promise((res) => setTimeout(res, 5));
    assert.equal(s.engine.running, 0);
    assert.ok(s.engine.steps < 1000, `engine ran ${s.engine.steps} steps`);
  });
});

/** Everything control can change, read straight from the live controller. */
function controllerState(d: ResidencyDriver) {
  const c = d.controller;
  return { frozen: c.frozen, counting: c.counting, budgets: { ...c.budgets }, stats: { ...c.stats }, queued: c.queueDepth, map: c.map() };
}

describe('HTTP control == control file', () => {
  let viaHttp: Serving;
  let viaFile: Serving;
  let dirA: string;
  let dirB: string;
  before(async () => {
    dirA = mkdtempSync(join(tmpdir(), 'serve-http-'));
    dirB = mkdtempSync(join(tmpdir(), 'serve-file-'));
    const common = { modelDir: MODEL_DIR, model, backend: 'cpu' as const, hot: 49, port: 0, host: '127.0.0.1', log: quiet };
    viaHttp = await startServing({ ...common, residencyDir: dirA });
    viaFile = await startServing({ ...common, residencyDir: dirB });
  });
  after(async () => {
    await viaHttp.close();
    await viaFile.close();
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  });

  test('the same commands, one by HTTP and one by file, leave the same controller state', async () => {
    const commands: { cmd: unknown; ok: boolean }[] = [
      { cmd: { freeze: false, budgets: { drain_every: 16, hysteresis: 2 } }, ok: true },
      { cmd: { counting: false }, ok: true },
      { cmd: { bogus: true, freeze: true }, ok: false },
      { cmd: { budgets: { hysteresis: 'high' } }, ok: false },
      { cmd: { restore_map: true, freeze: false }, ok: false },
      { cmd: { freeze: true, counting: true, baseline: true }, ok: true },
      { cmd: { dump_counts: 'counts.json' }, ok: true },
      { cmd: { restore_map: true }, ok: true },
    ];
    let n = 0;
    for (const { cmd, ok } of commands) {
      const before = controllerState(viaHttp.driver!);
      const r = await post(`${viaHttp.server.url}/v1/residency/control`, cmd);
      const body = await r.json();
      assert.equal(r.status, ok ? 200 : 400, `${JSON.stringify(cmd)}: ${JSON.stringify(body)}`);
      if (!ok) {
        assert.equal(body.error.code, 'bad_control');
        assert.deepEqual(controllerState(viaHttp.driver!), before, `${JSON.stringify(cmd)} was rejected but changed the controller`);
      }
      // The same command through the control file (a new file each time, so the watcher sees it).
      const tmp = join(dirB, `control.${n++}.tmp`);
      writeFileSync(tmp, JSON.stringify(cmd));
      renameSync(tmp, join(dirB, 'control.json'));
      viaFile.driver!.pollControl();
      assert.deepEqual(controllerState(viaFile.driver!), controllerState(viaHttp.driver!), `after ${JSON.stringify(cmd)}`);
    }
    assert.ok(existsSync(join(dirA, 'counts.json')) && existsSync(join(dirB, 'counts.json')), 'dump_counts wrote under both residency dirs');
    const live = await (await fetch(`${viaHttp.server.url}/v1/residency`)).json();
    assert.equal(live.controller.frozen, true);
    assert.equal(live.controller.budgets.drain_every, 16);
  });

  test('malformed control bodies are 400 and change nothing', async () => {
    const before = controllerState(viaHttp.driver!);
    for (const body of ['{"freeze":', '[]', '"freeze"', 'null', '{"budgets":{"drain_every":-4}}']) {
      const r = await post(`${viaHttp.server.url}/v1/residency/control`, body);
      assert.equal(r.status, 400, body);
      assert.equal(typeof (await r.json()).error.message, 'string');
    }
    assert.deepEqual(controllerState(viaHttp.driver!), before);
  });
});

test('an idle server reads the GO file without waiting for traffic', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'serve-idle-'));
  const idle = await startServing({ modelDir: MODEL_DIR, model, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: quiet, residencyDir: dir });
  try {
    assert.equal(idle.driver!.controller.frozen, true);
    writeFileSync(join(dir, 'GO'), '');
    const deadline = Date.now() + 5000;
    while (idle.driver!.controller.frozen && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(idle.driver!.controller.frozen, false, 'GO was read with no request in flight');
  } finally {
    await idle.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('serving all-hot refuses residency flags instead of ignoring them', async () => {
  await assert.rejects(
    startServing({ modelDir: MODEL_DIR, model, backend: 'cpu', hot: 64, adapt: true, port: 0, host: '127.0.0.1', log: quiet }),
    /nothing to adapt/,
  );
});
