// The OpenAI-compatible endpoints against a deterministic fake engine: shapes, streaming, stop strings,
// usage, the API key, and that a client going away cancels its sequence.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeEngine, charTokenizer, fakeToken } from './fakes.ts';
import { post, readSse, sseText, startTestServer } from './helpers.ts';
import type { TestServer } from './helpers.ts';

const greedy = (prompt: string, n: number) =>
  charTokenizer.decode(Array.from({ length: n }, (_, i) => fakeToken({ id: '', promptIds: charTokenizer.encode(prompt), sampling: { temperature: 0, topP: 1, maxTokens: n } }, i)));

describe('openai api (fake engine)', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer(); });
  after(async () => { await s.close(); });

  test('health and models', async () => {
    assert.deepEqual((await (await fetch(`${s.url}/health`)).json()).status, 'ok');
    const m = await (await fetch(`${s.url}/v1/models`)).json();
    assert.equal(m.data[0].id, 'fake-moe');
  });

  test('completion: greedy text, usage, finish_reason length', async () => {
    const r = await post(`${s.url}/v1/completions`, { model: 'fake-moe', prompt: 'hello', max_tokens: 12, temperature: 0 });
    assert.equal(r.status, 200);
    const j = await r.json();
    assert.equal(j.object, 'text_completion');
    assert.equal(j.choices[0].text, greedy('hello', 12));
    assert.equal(j.choices[0].finish_reason, 'length');
    assert.deepEqual(j.usage, { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 });
  });

  test('streaming delivers the same text, then [DONE], with usage when asked', async () => {
    const r = await post(`${s.url}/v1/completions`, { prompt: 'hello', max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type')!, /text\/event-stream/);
    const { chunks, done } = await readSse(r);
    assert.ok(done);
    assert.equal(sseText(chunks), greedy('hello', 12));
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
    assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 });
  });

  test('stop strings end the text before the stop, streaming or not', async () => {
    const full = greedy('hello', 20);
    const stop = full.slice(7, 9);
    const want = full.slice(0, full.indexOf(stop));
    const j = await (await post(`${s.url}/v1/completions`, { prompt: 'hello', max_tokens: 20, temperature: 0, stop: [stop, 'zzzz'] })).json();
    assert.equal(j.choices[0].text, want);
    assert.equal(j.choices[0].finish_reason, 'stop');
    const { chunks } = await readSse(await post(`${s.url}/v1/completions`, { prompt: 'hello', max_tokens: 20, temperature: 0, stop, stream: true }));
    assert.equal(sseText(chunks), want);
  });

  test('chat: plain template, assistant message, streaming role chunk first', async () => {
    const body = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, temperature: 0 };
    const j = await (await post(`${s.url}/v1/chat/completions`, body)).json();
    assert.equal(j.object, 'chat.completion');
    assert.equal(j.choices[0].message.role, 'assistant');
    assert.equal(j.choices[0].message.content, greedy('user: hi\n\nassistant:', 6));
    const { chunks, done } = await readSse(await post(`${s.url}/v1/chat/completions`, { ...body, stream: true }));
    assert.ok(done);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(sseText(chunks), j.choices[0].message.content);
  });

  test('seeded sampling repeats', async () => {
    const body = { prompt: 'x', max_tokens: 5, temperature: 0.8, seed: 42 };
    const a = await (await post(`${s.url}/v1/completions`, body)).json();
    const b = await (await post(`${s.url}/v1/completions`, body)).json();
    assert.equal(a.choices[0].text, b.choices[0].text);
  });

  test('a model this server does not serve is 404 naming model', async () => {
    const r = await post(`${s.url}/v1/completions`, { model: 'gpt-9', prompt: 'x' });
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.param, 'model');
  });
});

describe('api key', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer({ config: { apiKey: 'sekret' } }); });
  after(async () => { await s.close(); });

  test('guards /v1/*, not /health', async () => {
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    for (const path of ['/v1/models', '/v1/residency']) {
      const r = await fetch(`${s.url}${path}`);
      assert.equal(r.status, 401);
      assert.equal((await r.json()).error.type, 'authentication_error');
    }
    assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer wrong' })).status, 401);
    assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer sekret' })).status, 200);
    assert.equal((await post(`${s.url}/v1/residency/control`, { freeze: true })).status, 401);
  });
});

describe('cancellation and admission', () => {
  test('a client closing its stream cancels the sequence', async () => {
    const engine = new FakeEngine({ stepMs: 5 });
    const s = await startTestServer({ engine });
    try {
      const ac = new AbortController();
      const r = await fetch(`${s.url}/v1/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'x', max_tokens: 200, stream: true, ignore_eos: true }) });
      const reader = r.body!.getReader();
      await reader.read();
      ac.abort();
      for (let i = 0; i < 200 && engine.cancelled === 0; i++) await new Promise((res) => setTimeout(res, 10));
      assert.equal(engine.cancelled, 1);
      for (let i = 0; i < 200 && engine.running > 0; i++) await new Promise((res) => setTimeout(res, 10));
      assert.equal(engine.running, 0);
    } finally { await s.close(); }
  });

  test('a client going away before a non-streamed answer cancels the sequence', async () => {
    const engine = new FakeEngine({ stepMs: 5 });
    const s = await startTestServer({ engine });
    try {
      const ac = new AbortController();
      const p = fetch(`${s.url}/v1/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'x', max_tokens: 200 }) }).catch((e) => e);
      for (let i = 0; i < 200 && engine.running === 0; i++) await new Promise((res) => setTimeout(res, 5));
      ac.abort();
      await p;
      for (let i = 0; i < 200 && engine.cancelled === 0; i++) await new Promise((res) => setTimeout(res, 10));
      assert.equal(engine.cancelled, 1);
    } finally { await s.close(); }
  });

  test('a full queue answers 429 with Retry-After, and serving resumes', async () => {
    const engine = new FakeEngine({ maxBatch: 1 });
    engine.paused = true;
    const s = await startTestServer({ engine, config: { maxQueue: 2 } });
    try {
      const waiting = [post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 2 }), post(`${s.url}/v1/completions`, { prompt: 'b', max_tokens: 2 })];
      for (let i = 0; i < 200 && engine.queueDepth < 2; i++) await new Promise((res) => setTimeout(res, 5));
      const r = await post(`${s.url}/v1/completions`, { prompt: 'c', max_tokens: 2 });
      assert.equal(r.status, 429);
      assert.equal(r.headers.get('retry-after'), '1');
      assert.equal((await r.json()).error.code, 'queue_full');
      const tooMany = await post(`${s.url}/v1/completions`, { prompt: ['c', 'd'], n: 2, max_tokens: 2 });
      assert.equal(tooMany.status, 400, 'more sequences than the queue holds at all');
      assert.match((await tooMany.json()).error.message, /needs 4 sequences/);
      engine.resume();
      for (const w of await Promise.all(waiting)) assert.equal(w.status, 200);
      assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'c', max_tokens: 2 })).status, 200);
    } finally { await s.close(); }
  });
});
