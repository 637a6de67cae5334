// `residency serve` as a process: SIGINT finishes the responses in flight (the stream ends with [DONE])
// and refuses new requests, then the process exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
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
