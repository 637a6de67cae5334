// Chat templates (issue 13 item 4): the checkpoint's own (chat_template.jinja wins over tokenizer_config.json's
// chat_template), --chat-template's text replacing it, chat refused without one; tools rendered by the
// template and <tool_call> blocks parsed back. Templates are written by this test.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Template } from '@huggingface/jinja';
import type { GenerationEngine, GenerationEvent, GenerationRequest } from '../../src/engine/types.ts';
import { loadModel, type LoadedModel } from '../../src/model/load.ts';
import { startServing, type ServeOptions } from '../../src/server/boot.ts';
import { PLAIN_CHAT_TEMPLATE } from '../../src/server/chat-template.ts';
import { charTokenizer, fakeModel } from './fakes.ts';
import { post, readSse, startTestServer } from './helpers.ts';

const TINY = resolve(process.cwd(), 'models/tiny-moe');
const quiet = () => {};

/** A Hermes-style template: tools listed in a system block, calls expected as <tool_call>{json}</tool_call>. */
const TOOL_TEMPLATE = [
  '{%- if tools %}<|system|>tools: {% for t in tools %}{{ t.function.name }};{% endfor %} answer with <tool_call>{"name", "arguments"}</tool_call>{{ "\\n" }}{%- endif %}',
  '{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.name }}({{ c.function.arguments | tojson }})</tool_call>{% endfor %}{% endif %}{{ "\\n" }}{%- endfor %}',
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}',
].join('');

test('the shipped tiny-moe carries the plain format as its chat_template.jinja', () => {
  assert.equal(readFileSync(join(TINY, 'chat_template.jinja'), 'utf8'), PLAIN_CHAT_TEMPLATE);
  const out = new Template(PLAIN_CHAT_TEMPLATE).render({ messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }], add_generation_prompt: true });
  assert.equal(out, 'system: be brief\n\nuser: hi\n\nassistant:');
});

describe('serve on a checkpoint: which template renders chat', () => {
  let dir: string;
  let model: LoadedModel;
  const serve = (extra: Partial<ServeOptions> = {}) => startServing({ modelDir: dir, model, backend: 'cpu', hot: 64, port: 0, host: '127.0.0.1', log: quiet, ...extra });
  const promptTokens = async (url: string, messages: unknown[]) => {
    const r = await post(`${url}/v1/chat/completions`, { messages, max_tokens: 1, temperature: 0 });
    return { status: r.status, body: await r.json() };
  };
  const messages = [{ role: 'user', content: 'hello there' }];

  before(async () => {
    // tiny-moe's files, its template left out: a base checkpoint with no chat format.
    dir = mkdtempSync(join(tmpdir(), 'chat-tpl-'));
    for (const f of readdirSync(TINY)) if (f !== 'chat_template.jinja' && f !== 'tokenizer_config.json') symlinkSync(join(TINY, f), join(dir, f));
    writeFileSync(join(dir, 'tokenizer_config.json'), readFileSync(join(TINY, 'tokenizer_config.json')));
    model = await loadModel(dir);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('no template: chat is refused naming --chat-template; completions still work', async () => {
    const s = await serve();
    try {
      const r = await promptTokens(s.server.url, messages);
      assert.equal(r.status, 400);
      assert.equal(r.body.error.code, 'chat_template_missing');
      assert.match(r.body.error.message, /--chat-template FILE/);
      assert.equal((await (await fetch(`${s.server.url}/v1/models`)).json()).data[0].chat_template, 'none');
      assert.equal((await post(`${s.server.url}/v1/completions`, { prompt: 'hi', max_tokens: 2 })).status, 200);
    } finally { await s.close(); }
  });

  test("tokenizer_config.json's chat_template, then chat_template.jinja over it, then --chat-template over both", async () => {
    const cfg = JSON.parse(readFileSync(join(TINY, 'tokenizer_config.json'), 'utf8'));
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...cfg, chat_template: 'CFG {{ messages[0].content }} ->' }));
    let s = await serve();
    try {
      const r = await promptTokens(s.server.url, messages);
      assert.equal(r.status, 200);
      assert.equal(r.body.usage.prompt_tokens, model.tokenizer.encode('CFG hello there ->').length);
    } finally { await s.close(); }
    writeFileSync(join(dir, 'chat_template.jinja'), 'JINJA FILE {{ messages[0].content }} {{ eos_token }}|');
    s = await serve();
    try {
      const want = model.tokenizer.encode('JINJA FILE hello there <|endoftext|>|');
      assert.equal((await promptTokens(s.server.url, messages)).body.usage.prompt_tokens, want.length);
      const t = await (await post(`${s.server.url}/tokenize`, { messages })).json();
      assert.deepEqual(t.tokens, want);
    } finally { await s.close(); }
    s = await serve({ chatTemplate: 'OVERRIDE {{ messages[0].content }}' });
    try {
      assert.equal((await promptTokens(s.server.url, messages)).body.usage.prompt_tokens, model.tokenizer.encode('OVERRIDE hello there').length);
      assert.equal((await (await fetch(`${s.server.url}/v1/models`)).json()).data[0].chat_template, '--chat-template');
    } finally { await s.close(); }
    unlinkSync(join(dir, 'chat_template.jinja'));
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  });

  test('a --chat-template that does not parse is refused at start, naming the flag', async () => {
    await assert.rejects(serve({ chatTemplate: '{% for %}' }), /--chat-template file does not parse/);
  });
});

/** Emits a fixed text (one character per token, charTokenizer) for every request, then 'stop'. */
class ScriptedEngine implements GenerationEngine {
  queueDepth = 0;
  running = 0;
  readonly prompts: string[] = [];
  constructor(private readonly text: string) {}
  submit(req: GenerationRequest, onEvent: (e: GenerationEvent) => void) {
    this.prompts.push(charTokenizer.decode(req.promptIds));
    setImmediate(() => {
      [...this.text].forEach((ch, index) => onEvent({ type: 'token', tokenId: ch.charCodeAt(0), index }));
      onEvent({ type: 'done', reason: 'stop', promptTokens: req.promptIds.length, completionTokens: this.text.length });
    });
    return { cancel() {} };
  }
  async close() {}
}

test('tools through a template that defines them: rendered into the prompt, <tool_call> blocks parsed back', async () => {
  const engine = new ScriptedEngine('Sure.<tool_call>{"name": "ls", "arguments": {"path": "/tmp"}}</tool_call>');
  const s = await startTestServer({ engine, model: { ...fakeModel, maxPositions: 1024, chatTemplate: TOOL_TEMPLATE } });
  try {
    const tools = [{ type: 'function', function: { name: 'ls', parameters: { type: 'object', properties: { path: { type: 'string' } } } } }];
    const history = [
      { role: 'user', content: 'what is in /etc?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'ls', arguments: '{"path":"/etc"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'passwd' },
      { role: 'user', content: 'and /tmp?' },
    ];
    const j = await (await post(`${s.url}/v1/chat/completions`, { messages: history, tools, max_tokens: 100 })).json();
    assert.equal(j.error, undefined, JSON.stringify(j.error));
    assert.equal(engine.prompts[0], '<|system|>tools: ls; answer with <tool_call>{"name", "arguments"}</tool_call>\n<|user|>what is in /etc?\n' +
      '<|assistant|><tool_call>ls({"path": "/etc"})</tool_call>\n<|tool|>passwd\n<|user|>and /tmp?\n<|assistant|>');
    const choice = j.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, 'Sure.');
    assert.equal(choice.message.tool_calls.length, 1);
    assert.equal(choice.message.tool_calls[0].function.name, 'ls');
    assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { path: '/tmp' });
    assert.match(choice.message.tool_calls[0].id, /^call_/);
    // Streamed: the text is held (it may be a call) and arrives whole, the call as a tool_calls delta.
    const { chunks } = await readSse(await post(`${s.url}/v1/chat/completions`, { messages: history, tools, max_tokens: 100, stream: true }));
    const call = chunks.flatMap((c) => c.choices).find((c) => c.delta?.tool_calls);
    assert.equal(call.delta.tool_calls[0].function.name, 'ls');
    assert.equal(call.delta.content, 'Sure.');
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
    // tool_choice 'none': the template sees no tools and the text is not parsed.
    const none = await (await post(`${s.url}/v1/chat/completions`, { messages: history.slice(0, 1), tools, tool_choice: 'none', max_tokens: 100 })).json();
    assert.equal(engine.prompts.at(-1), '<|user|>what is in /etc?\n<|assistant|>');
    assert.equal(none.choices[0].finish_reason, 'stop');
    assert.match(none.choices[0].message.content, /<tool_call>/);
  } finally {
    await s.close();
  }
});
