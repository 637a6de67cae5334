// Shutdown with a deadline: queued requests are refused at once with a clear error, running streams get
// the timeout to finish and are then ended; nothing waits for the queue to drain (16 x 2,000 tokens: 40 s).
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { resolve } from 'node:path';
import { loadModel, type LoadedModel } from '../../src/model/load.ts';
import { startServing } from '../../src/server/boot.ts';
import { post, readSse } from './helpers.ts';

const MODEL_DIR = resolve(process.cwd(), 'models/tiny-moe');
let model: LoadedModel;
before(async () => { model = await loadModel(MODEL_DIR); });

const serve = () => startServing({ modelDir: MODEL_DIR, model, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: () => {}, scheduler: { maxRunning: 1 } });
const long = { prompt: 'The ls command', max_tokens: 2000, ignore_eos: true, temperature: 0 };

test('queued requests are refused at once; a running stream past the timeout is ended naming it; shutdown keeps its deadline', { timeout: 60_000 }, async () => {
  const s = await serve();
  const url = s.server.url;
  const running = post(`${url}/v1/completions`, { ...long, stream: true });
  const res = await running;
  let got = 0;
  const reading = readSse(res, () => { got++; });
  while (got < 3) await new Promise((r) => setTimeout(r, 5));
  const queued = [post(`${url}/v1/completions`, long), post(`${url}/v1/completions`, long), post(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2000 })];
  while (s.engine.queueDepth < 3) await new Promise((r) => setTimeout(r, 5));
  const t0 = performance.now();
  const result = await s.shutdown(300);
  const ms = performance.now() - t0;
  assert.deepEqual(result, { refused: 3, cut: 1 });
  assert.ok(ms < 3000, `shutdown took ${ms.toFixed(0)} ms with a 300 ms timeout`);
  for (const r of await Promise.all(queued)) {
    assert.equal(r.status, 503);
    const e = (await r.json()).error;
    assert.equal(e.code, 'shutting_down');
    assert.match(e.message, /still queued and never started/);
  }
  const { chunks, done } = await reading;
  assert.equal(done, false, 'a cut stream does not claim [DONE]');
  assert.match(chunks.at(-1).error.message, /ended by the shutdown timeout \(0\.3 s\)/);
  assert.ok(chunks.length > 3 && chunks.length < 2000);
});

test('a running stream that ends within the timeout finishes whole; new requests after shutdown starts get no answer from the engine', { timeout: 60_000 }, async () => {
  const s = await serve();
  const url = s.server.url;
  const res = await post(`${url}/v1/completions`, { ...long, max_tokens: 60, stream: true });
  let got = 0;
  const reading = readSse(res, () => { got++; });
  while (got < 2) await new Promise((r) => setTimeout(r, 5));
  const result = await s.shutdown(30_000);
  assert.deepEqual(result, { refused: 0, cut: 0 });
  const { chunks, done } = await reading;
  assert.equal(done, true);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  await assert.rejects(fetch(`${url}/health`), 'the listener is closed');
});

test('clients holding connections open (idle keep-alive, silent, half a request) do not stretch shutdown past its timeout', { timeout: 60_000 }, async () => {
  const s = await serve();
  const url = s.server.url;
  const { port } = new URL(url);
  const held: Socket[] = [];
  const open = (data: string) => new Promise<Socket>((res) => {
    const c = connect(Number(port), '127.0.0.1', () => { if (data) c.write(data); res(c); });
    c.on('error', () => {});
    c.on('data', () => {}); // read replies, so keep-alive connections stay idle, not blocked
    held.push(c);
  });
  try {
    const res = await post(`${url}/v1/completions`, { ...long, stream: true });
    let got = 0;
    const reading = readSse(res, () => { got++; });
    while (got < 3) await new Promise((r) => setTimeout(r, 5));
    await open('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n');
    await open('');
    await open('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    const result = await s.shutdown(1000);
    const ms = performance.now() - t0;
    assert.equal(result.cut, 1);
    assert.ok(ms < 1500, `shutdown took ${ms.toFixed(0)} ms with a 1,000 ms timeout`);
    const { done } = await reading;
    assert.equal(done, false);
  } finally {
    for (const c of held) c.destroy();
  }
});
