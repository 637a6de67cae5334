// `residency serve` as a process: SIGINT finishes the responses in flight (the stream ends with [DONE])
// and refuses new requests, then the process exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withServe } from './serve-child.ts';

test('SIGINT lets an in-flight stream finish, then exits 0', () => withServe(['--port', '0', '--hot', '49'], async ({ child, url, exited }) => {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'hello', max_tokens: 120, ignore_eos: true, stream: true, temperature: 0 }),
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value, { stream: true }); // the first chunk: generation is under way
  child.kill('SIGINT');
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  assert.match(text, /"finish_reason":"length"/);
  assert.ok(text.trimEnd().endsWith('data: [DONE]'), `the stream ends with [DONE]: ...${text.slice(-120)}`);
  assert.equal(await exited, 0);
}));

test('serve MODEL positional, --served-model-name, --chat-template FILE; one access-log line per request', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'serve-cli-'));
  const tpl = join(dir, 'chat.jinja');
  writeFileSync(tpl, 'Q: {{ messages[-1].content }}\nA:');
  await withServe(['models/tiny-moe', '--served-model-name', 'tiny', '--chat-template', tpl, '--port', '0', '--hot', '64'], async ({ child, url, stderr }) => {
    let log = stderr;
    child.stderr.on('data', (s: string) => { log += s; });
    const models = await (await fetch(`${url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'tiny');
    assert.equal(models.data[0].chat_template, '--chat-template');
    const r = await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] }) });
    const t = await r.json();
    const d = await (await fetch(`${url}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens: t.tokens }) })).json();
    assert.equal(d.prompt, 'Q: hi\nA:');
    await new Promise((res) => setTimeout(res, 100));
    assert.match(log, /^GET \/v1\/models 200 \d+\.\dms$/m);
    assert.match(log, /^POST \/tokenize 200 /m);
  });
});

test('bad serve arguments fail before loading, naming the flag', () => {
  const run = (...args: string[]) => spawnSync(process.execPath, ['bin/residency.js', 'serve', ...args], { encoding: 'utf8' });
  assert.match(run('a', 'b').stderr, /one MODEL folder at most/);
  assert.match(run('models/tiny-moe', '-m', 'models/tiny-moe').stderr, /give the model once/);
  assert.match(run('--chat-template', '/no/such.jinja').stderr, /--chat-template \/no\/such\.jinja: cannot read it \(ENOENT\)/);
  const help = run('--help').stdout;
  assert.match(help, /49 of 64 for the shipped tiny-moe/);
  assert.match(spawnSync(process.execPath, ['bin/residency.js', '--version'], { encoding: 'utf8' }).stdout, /^moe-residency \d+\.\d+\.\d+\n$/);
});
