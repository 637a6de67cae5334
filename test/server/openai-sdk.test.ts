// The official `openai` SDK against a live server on the shipped tiny model (CPU): every call the SDK makes
// here must succeed with real content (n choices, logprobs, JSON that parses, tool calls parsed back).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import OpenAI, { NotFoundError, BadRequestError } from 'openai';
import { loadModel, type LoadedModel } from '../../src/model/load.ts';
import { startServing, type Serving } from '../../src/server/boot.ts';

const MODEL_DIR = resolve(process.cwd(), 'models/tiny-moe');
const quiet = () => {};

describe('openai SDK against the tiny model', () => {
  let s: Serving;
  let client: OpenAI;
  let model: LoadedModel;
  const logs: string[] = [];
  before(async () => {
    model = await loadModel(MODEL_DIR);
    s = await startServing({ modelDir: MODEL_DIR, model, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: (l) => logs.push(l), accessLog: (l) => logs.push(l), config: { apiKey: 'sk-test' } });
    client = new OpenAI({ baseURL: `${s.server.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  });
  after(async () => { await s.close(); });

  test('models.list and models.retrieve; an unknown model is NotFoundError', async () => {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), ['tiny-moe']);
    const one = await client.models.retrieve('tiny-moe');
    assert.equal(one.id, 'tiny-moe');
    await assert.rejects(client.models.retrieve('gpt-9'), NotFoundError);
    await assert.rejects(client.completions.create({ model: 'gpt-9', prompt: 'x' }), NotFoundError);
  });

  test('completions: prompt arrays x n, logprobs, echo, penalties, top_k/min_p, stop arrays, user, seed', async () => {
    const r = await client.completions.create({
      model: 'tiny-moe', prompt: ['The ls command', 'Die Datei'], n: 2, max_tokens: 6, temperature: 0.7, seed: 3,
      logprobs: 2, echo: true, presence_penalty: 0.2, frequency_penalty: 0.1, stop: ['\n\n', 'zzz'], user: 'u1',
      // @ts-expect-error vLLM's sampling extensions travel as extra body fields
      top_k: 40, min_p: 0.02, repetition_penalty: 1.1,
    });
    assert.equal(r.choices.length, 4);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    for (const c of r.choices) {
      assert.ok(c.text.startsWith(c.index < 2 ? 'The ls command' : 'Die Datei'), 'echo');
      const lp = c.logprobs!;
      const generated = lp.token_logprobs!.filter((x) => x !== null);
      assert.ok(generated.length >= 1 && generated.every((x) => x! <= 0));
      assert.ok(lp.top_logprobs!.filter(Boolean).every((t) => Object.keys(t!).length >= 1 && Object.keys(t!).length <= 2));
    }
    assert.equal(r.usage!.prompt_tokens, model.tokenizer.encode('The ls command').length + model.tokenizer.encode('Die Datei').length);
    const again = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', max_tokens: 8, temperature: 0.7, seed: 3, n: 2 });
    const twice = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', max_tokens: 8, temperature: 0.7, seed: 3, n: 2 });
    assert.deepEqual(again.choices.map((c) => c.text), twice.choices.map((c) => c.text), 'seeded choices repeat');
  });

  test("neutral values of the new fields change nothing: greedy text is the plain argmax's", async () => {
    const plain = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', max_tokens: 24, temperature: 0 });
    const neutral = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', max_tokens: 24, temperature: 0, presence_penalty: 0, frequency_penalty: 0, top_p: 1, n: 1, logprobs: 0, echo: false, stop: [], user: 'x',
      // @ts-expect-error vLLM's extensions
      top_k: -1, min_p: 0, repetition_penalty: 1 });
    assert.equal(neutral.choices[0]!.text, plain.choices[0]!.text);
    const penalised = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', max_tokens: 24, temperature: 0, frequency_penalty: 2 });
    assert.notEqual(penalised.choices[0]!.text, plain.choices[0]!.text, 'a real penalty does change the greedy text');
  });

  test('completions stream with n: every choice ends, usage last', async () => {
    const stream = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command', n: 3, max_tokens: 5, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const text = ['', '', ''];
    const finish: (string | null)[] = [null, null, null];
    let usage;
    for await (const ch of stream) {
      for (const c of ch.choices) { text[c.index] += c.text; if (c.finish_reason) finish[c.index] = c.finish_reason; }
      if (ch.usage) usage = ch.usage;
    }
    assert.ok(text.every((t) => t === text[0] && t.length > 0), 'greedy choices agree');
    assert.ok(finish.every((f) => f === 'length' || f === 'stop'));
    assert.equal(usage!.completion_tokens, 15);
  });

  test('chat: n, logprobs/top_logprobs, a tool round trip in the history (role tool, assistant content null)', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny-moe', n: 2, max_tokens: 6, temperature: 0.9, seed: 11, logprobs: true, top_logprobs: 3,
      messages: [
        { role: 'system', content: 'You list files.' },
        { role: 'user', content: 'What is in /tmp?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{"path":"/tmp"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'a.txt b.txt' },
      ],
    });
    assert.equal(r.choices.length, 2);
    for (const c of r.choices) {
      const content = c.logprobs!.content!;
      assert.ok(content.length >= 1);
      assert.ok(content.every((t) => t.logprob <= 0 && t.top_logprobs.length === 3 && Array.isArray(t.bytes)));
      assert.equal(content.map((t) => t.token).join(''), c.message.content);
    }
  });

  test('chat response_format json_schema: the content parses and fits the schema', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' }, kind: { type: 'string', enum: ['file', 'dir'] }, size: { type: 'integer' } }, required: ['ok', 'kind', 'size'], additionalProperties: false };
    const r = await client.chat.completions.create({ model: 'tiny-moe', temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'Describe ls as JSON' }], response_format: { type: 'json_schema', json_schema: { name: 'entry', schema, strict: true } } });
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    const v = JSON.parse(r.choices[0]!.message.content!);
    assert.deepEqual(Object.keys(v), ['ok', 'kind', 'size']);
    assert.equal(typeof v.ok, 'boolean');
    assert.ok(['file', 'dir'].includes(v.kind));
    assert.ok(Number.isInteger(v.size));
  });

  test('response_format json_object: whole JSON objects, streamed and not, completions too', async () => {
    const r = await client.chat.completions.create({ model: 'tiny-moe', temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'Give a JSON object' }], response_format: { type: 'json_object' } });
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.equal(typeof JSON.parse(r.choices[0]!.message.content!), 'object');
    const stream = await client.chat.completions.create({ model: 'tiny-moe', temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'Give a JSON object' }], response_format: { type: 'json_object' }, stream: true });
    let text = '';
    for await (const ch of stream) text += ch.choices[0]?.delta.content ?? '';
    assert.equal(text, r.choices[0]!.message.content);
    const c = await client.completions.create({ model: 'tiny-moe', prompt: 'The ls command as JSON:', max_tokens: 60, temperature: 0, // @ts-expect-error vLLM accepts response_format on completions
      response_format: { type: 'json_object' } });
    if (c.choices[0]!.finish_reason === 'stop') JSON.parse(c.choices[0]!.text);
    else assert.ok(c.choices[0]!.text.startsWith('{'));
  });

  test('tools: a named tool_choice yields a parsed tool call whose arguments fit the parameters', async () => {
    const tools = [{ type: 'function' as const, function: { name: 'ls', description: 'list a folder', parameters: { type: 'object', properties: { path: { type: 'string', enum: ['/tmp', '/home', '/etc'] }, all: { type: 'boolean' } }, required: ['path', 'all'] } } }];
    const r = await client.chat.completions.create({ model: 'tiny-moe', temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'list /tmp' }], tools, tool_choice: { type: 'function', function: { name: 'ls' } } });
    const choice = r.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    const call = choice.message.tool_calls![0]!;
    assert.equal(call.type, 'function');
    if (call.type !== 'function') return;
    assert.equal(call.function.name, 'ls');
    const args = JSON.parse(call.function.arguments);
    assert.ok(['/tmp', '/home', '/etc'].includes(args.path));
    assert.equal(typeof args.all, 'boolean');
    const required = await client.chat.completions.create({ model: 'tiny-moe', temperature: 0, max_tokens: 40, messages: [{ role: 'user', content: 'list /tmp' }], tools, tool_choice: 'required', stream: true });
    let streamed;
    for await (const ch of required) streamed ??= ch.choices[0]?.delta.tool_calls?.[0];
    assert.equal(streamed?.function?.name, 'ls');
  });

  test('unknown fields are ignored, named in x-ignored-fields and logged; bad values are BadRequestError naming the field', async () => {
    const { response } = await client.completions.create({ model: 'tiny-moe', prompt: 'x', max_tokens: 2, // @ts-expect-error not an OpenAI field
      mood: 'calm' }).withResponse();
    assert.equal(response.headers.get('x-ignored-fields'), 'mood');
    assert.ok(logs.some((l) => /ignored unknown field mood/.test(l)));
    await assert.rejects(client.completions.create({ model: 'tiny-moe', prompt: 'x', presence_penalty: 5 }), (e: unknown) => e instanceof BadRequestError && (e.error as { param?: string }).param === 'presence_penalty');
    assert.ok(logs.some((l) => /^POST \/v1\/completions 400 /.test(l)), 'access log line');
  });

  test('/tokenize, /detokenize and /version (vLLM), behind the API key', async () => {
    const h = { 'content-type': 'application/json', authorization: 'Bearer sk-test' };
    const t = await (await fetch(`${s.server.url}/tokenize`, { method: 'POST', headers: h, body: JSON.stringify({ prompt: 'The ls command' }) })).json();
    assert.deepEqual(t.tokens, model.tokenizer.encode('The ls command'));
    assert.equal(t.count, t.tokens.length);
    const d = await (await fetch(`${s.server.url}/detokenize`, { method: 'POST', headers: h, body: JSON.stringify({ tokens: t.tokens }) })).json();
    assert.equal(d.prompt, 'The ls command');
    const m = await (await fetch(`${s.server.url}/tokenize`, { method: 'POST', headers: h, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }) })).json();
    assert.deepEqual(m.tokens, model.tokenizer.encode('user: hi\n\nassistant:'));
    assert.equal((await fetch(`${s.server.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"prompt":"x"}' })).status, 401);
    assert.match((await (await fetch(`${s.server.url}/version`)).json()).version, /^\d+\.\d+\.\d+/);
  });
});
