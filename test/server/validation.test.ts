// Bad requests get a 4xx with an OpenAI-style error naming the field, and the server keeps serving:
// one case per kind of mistake, then a seeded fuzz loop of a few hundred bad bodies.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { post, startTestServer } from './helpers.ts';
import type { TestServer } from './helpers.ts';

async function expectError(r: Response, status: number, param: string | null, message?: RegExp): Promise<void> {
  const j = await r.json();
  assert.equal(r.status, status, JSON.stringify(j));
  assert.deepEqual(Object.keys(j.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof j.error.message, 'string');
  assert.equal(j.error.param, param, j.error.message);
  if (message) assert.match(j.error.message, message);
}

describe('request validation', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer({ config: { maxBodyBytes: 4096 } }); });
  after(async () => { await s.close(); });
  const comp = () => `${s.url}/v1/completions`;
  const chat = () => `${s.url}/v1/chat/completions`;

  test('malformed JSON', async () => expectError(await post(comp(), '{"prompt": "x",'), 400, null, /not valid JSON/));
  test('wrong types', async () => {
    await expectError(await post(comp(), { prompt: 5 }), 400, 'prompt');
    await expectError(await post(comp(), { prompt: 'x', temperature: 'hot' }), 400, 'temperature');
    await expectError(await post(comp(), { prompt: 'x', stream: 'yes' }), 400, 'stream');
    await expectError(await post(chat(), { messages: [{ role: 'user', content: 3 }] }), 400, 'messages[0].content');
    await expectError(await post(chat(), { messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages[0].role');
    await expectError(await post(comp(), [1, 2]), 400, null);
  });
  test('unknown fields are ignored, and named in the x-ignored-fields header (as vLLM warns)', async () => {
    const r = await post(comp(), { prompt: 'x', max_tokens: 2, mood: 'calm', logit_bias_v2: {} });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-ignored-fields'), 'mood, logit_bias_v2');
    assert.equal((await r.json()).choices.length, 1);
    const c = await post(chat(), { messages: [{ role: 'user', content: 'x', mood: 'calm' }], max_tokens: 2 });
    assert.equal(c.status, 200);
    assert.equal(c.headers.get('x-ignored-fields'), null, 'only top-level fields are named');
  });
  test('known fields keep their checks: wrong types and values name the field', async () => {
    await expectError(await post(comp(), { prompt: 'x', frequency_penalty: 3 }), 400, 'frequency_penalty');
    await expectError(await post(comp(), { prompt: 'x', logprobs: 21 }), 400, 'logprobs');
    await expectError(await post(comp(), { prompt: 'x', n: 17 }), 400, 'n', /at most 16/);
    await expectError(await post(comp(), { prompt: 'x', best_of: 3 }), 400, 'best_of', /best_of = n/);
    await expectError(await post(comp(), { prompt: 'x', response_format: { type: 'yaml' } }), 400, 'response_format.type');
    await expectError(await post(comp(), { prompt: 'x', response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: 'a+' } } } } } }), 400, 'response_format.json_schema.schema.properties.a.pattern', /not supported/);
    await expectError(await post(chat(), { messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 400, 'top_logprobs', /logprobs: true/);
    await expectError(await post(chat(), { messages: [{ role: 'robot', content: 'x' }] }), 400, 'messages[0].role');
    await expectError(await post(chat(), { messages: [{ role: 'user', content: 'x' }], tool_choice: 'required' }), 400, 'tool_choice', /needs tools/);
    await expectError(await post(chat(), { messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }), 400, 'tool_choice.function.name');
    await expectError(await post(comp(), { prompt: 'x', stream_options: { include_usage: 'yes' } }), 400, 'stream_options.include_usage');
  });
  test('missing required fields', async () => {
    await expectError(await post(comp(), { max_tokens: 3 }), 400, 'prompt');
    await expectError(await post(chat(), { messages: [] }), 400, 'messages');
  });
  test('negative, zero, fractional and huge max_tokens', async () => {
    await expectError(await post(comp(), { prompt: 'x', max_tokens: -1 }), 400, 'max_tokens');
    await expectError(await post(comp(), { prompt: 'x', max_tokens: 0 }), 400, 'max_tokens');
    await expectError(await post(comp(), { prompt: 'x', max_tokens: 2.5 }), 400, 'max_tokens');
    await expectError(await post(comp(), { prompt: 'x', max_tokens: 1e12 }), 400, 'max_tokens');
    // Fits the context alone, but not with the prompt (the fake's context is 256).
    await expectError(await post(comp(), { prompt: 'y'.repeat(200), max_tokens: 100 }), 400, 'max_tokens', /leaves room for 56/);
    await expectError(await post(chat(), { messages: [{ role: 'user', content: 'x' }], max_completion_tokens: -5 }), 400, 'max_completion_tokens');
  });
  test('out-of-range sampling values and token ids', async () => {
    await expectError(await post(comp(), { prompt: 'x', top_p: 0 }), 400, 'top_p');
    await expectError(await post(comp(), { prompt: 'x', temperature: -1 }), 400, 'temperature');
    await expectError(await post(comp(), { prompt: 'x', seed: -3 }), 400, 'seed');
    await expectError(await post(comp(), { prompt: 'x', n: 0 }), 400, 'n');
    await expectError(await post(comp(), { prompt: ['a', [1, 2]] }), 400, 'prompt');
    await expectError(await post(comp(), { prompt: [[1], [1, 999]] }), 400, 'prompt[1][1]');
    await expectError(await post(comp(), { prompt: [1, 999] }), 400, 'prompt[1]');
    await expectError(await post(comp(), { prompt: '' }), 400, 'prompt');
    await expectError(await post(comp(), { prompt: 'y'.repeat(300) }), 400, 'prompt', /shorten the prompt/);
  });
  test('invalid UTF-8', async () => {
    const bytes = new Uint8Array([...new TextEncoder().encode('{"prompt":"'), 0xff, 0xfe, 0xc3, ...new TextEncoder().encode('"}')]);
    await expectError(await post(comp(), bytes), 400, null, /UTF-8/);
  });
  test('oversized bodies: by content-length and by actual bytes (chunked)', async () => {
    await expectError(await post(comp(), { prompt: 'x'.repeat(5000) }), 413, null, /larger than 4096 bytes/);
    const big = new TextEncoder().encode(JSON.stringify({ prompt: 'x'.repeat(20000) }));
    const stream = new ReadableStream({ start(c) { for (let i = 0; i < big.length; i += 1000) c.enqueue(big.slice(i, i + 1000)); c.close(); } });
    const r = await fetch(comp(), { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit);
    await expectError(r, 413, null);
  });
  test('wrong content type and unknown endpoint', async () => {
    const r = await fetch(comp(), { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{"prompt":"x"}' });
    await expectError(r, 415, null);
    await expectError(await fetch(`${s.url}/v1/nope`), 404, null);
  });

  test('seeded fuzz: 300 bad bodies, zero 5xx, server healthy after', async () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const junkValues = [null, -1, 0, 1e308, -1e308, 2 ** 53, 1.5, '', 'x', '\u0000', [], {}, [null], { a: 1 }, true, false, 'y'.repeat(3000)];
    const fields = ['prompt', 'messages', 'max_tokens', 'temperature', 'top_p', 'seed', 'stop', 'stream', 'stream_options', 'n', 'model', 'user', 'logit_bias', '__proto__', 'constructor'];
    const counts = new Map<number, number>();
    for (let i = 0; i < 300; i++) {
      const kind = Math.floor(rnd() * 5);
      let body: string | Uint8Array;
      const obj: Record<string, unknown> = {};
      for (let k = 0, n = 1 + Math.floor(rnd() * 4); k < n; k++) obj[pick(fields)] = pick(junkValues);
      const text = JSON.stringify(obj);
      if (kind === 0) body = text;
      else if (kind === 1) body = text.slice(0, Math.floor(rnd() * text.length)); // truncated JSON
      else if (kind === 2) { // random bytes spliced in (invalid UTF-8 often)
        const b = new TextEncoder().encode(text);
        const out = new Uint8Array(b.length + 3);
        out.set(b);
        for (let j = 0; j < 3; j++) out[Math.floor(rnd() * out.length)] = Math.floor(rnd() * 256);
        body = out;
      } else if (kind === 3) body = JSON.stringify({ prompt: 'x', [pick(fields)]: pick(junkValues), max_tokens: pick([-1, 0, 1e9, 'ten', 3.3]) });
      else body = JSON.stringify({ messages: [{ role: pick(['user', 'bot', 7]), content: pick(junkValues) }], extra: 1 });
      const url = rnd() < 0.5 ? comp() : chat();
      const r = await post(url, body);
      counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
      const j = await r.json();
      assert.ok(r.status < 500, `fuzz body #${i} got ${r.status}: ${JSON.stringify(j)}`);
      if (r.status >= 400) assert.equal(typeof j.error.message, 'string');
    }
    const fiveXX = [...counts].filter(([st]) => st >= 500).reduce((a, [, n]) => a + n, 0);
    assert.equal(fiveXX, 0);
    console.log(`fuzz statuses: ${JSON.stringify(Object.fromEntries([...counts].sort()))}`);
    assert.equal((await (await fetch(`${s.url}/health`)).json()).status, 'ok');
    assert.equal((await post(comp(), { prompt: 'ok', max_tokens: 3 })).status, 200);
  });
});
