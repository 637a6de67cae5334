// Hostile clients: unpaired surrogates, stalled headers and bodies (slowloris), too many connections.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { FakeEngine } from './fakes.ts';
import { post, readSse, startTestServer } from './helpers.ts';

/** Opens a raw loopback socket to `url`, writes `data`, and resolves with the ms until the server closes it. */
function heldFor(url: string, data: string, giveUpMs: number): Promise<{ ms: number; closed: boolean; reply: string }> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const t0 = performance.now();
    const sock = connect(Number(port), '127.0.0.1', () => sock.write(data));
    let reply = '';
    sock.setEncoding('utf8').on('data', (s: string) => { reply += s; });
    const timer = setTimeout(() => { sock.destroy(); resolve({ ms: performance.now() - t0, closed: false, reply }); }, giveUpMs);
    sock.on('close', () => { clearTimeout(timer); resolve({ ms: performance.now() - t0, closed: true, reply }); });
    sock.on('error', () => {});
  });
}

test('a lone \\ud800 (escaped in JSON) is refused naming the field; a proper pair is accepted', async () => {
  const s = await startTestServer();
  try {
    let r = await post(`${s.url}/v1/completions`, '{"prompt":"ab\\ud800c","max_tokens":1}');
    let e = (await r.json()).error;
    assert.equal(r.status, 400);
    assert.equal(e.code, 'invalid_unicode');
    assert.equal(e.param, 'prompt');
    r = await post(`${s.url}/v1/chat/completions`, '{"messages":[{"role":"user","content":[{"type":"text","text":"\\udc00"}]}]}');
    e = (await r.json()).error;
    assert.equal(e.param, 'messages[0].content[0].text');
    assert.equal((await post(`${s.url}/v1/completions`, '{"prompt":"\\ud83d\\ude00","max_tokens":1}')).status, 200);
  } finally {
    await s.close();
  }
});

test('stalled headers and stalled bodies are cut off after their timeouts, not held for 300 s', async () => {
  const s = await startTestServer({ config: { headersTimeoutMs: 300, requestTimeoutMs: 600 } });
  try {
    const headers = await heldFor(s.url, 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n', 5000);
    assert.ok(headers.closed && headers.ms < 2500, `stalled headers held ${headers.ms.toFixed(0)} ms`);
    const body = await heldFor(s.url, 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt":', 5000);
    assert.ok(body.closed && body.ms < 3000, `stalled body held ${body.ms.toFixed(0)} ms`);
  } finally {
    await s.close();
  }
});

test('a streamed response longer than the request timeout is not cut', async () => {
  const s = await startTestServer({ engine: new FakeEngine({ stepMs: 5 }), config: { headersTimeoutMs: 200, requestTimeoutMs: 300 } });
  try {
    const t0 = performance.now();
    const { chunks, done } = await readSse(await post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 200, stream: true, ignore_eos: true }));
    assert.ok(performance.now() - t0 > 600, 'the stream outlived the timeouts');
    assert.equal(done, true);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  } finally {
    await s.close();
  }
});

test('connections past the cap are closed at once; the server serves again when one goes', async () => {
  const s = await startTestServer({ config: { maxConnections: 3 } });
  const { port } = new URL(s.url);
  const idle: Socket[] = [];
  try {
    for (let i = 0; i < 3; i++) idle.push(await new Promise<Socket>((resolve) => { const c = connect(Number(port), '127.0.0.1', () => resolve(c)); }));
    await new Promise((r) => setTimeout(r, 50));
    const extra = await heldFor(s.url, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 3000);
    assert.ok(extra.closed && extra.reply === '', `the 4th connection was ${extra.closed ? 'closed' : 'kept'} after ${extra.ms.toFixed(0)} ms, reply ${JSON.stringify(extra.reply.slice(0, 40))}`);
    idle.pop()!.destroy();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  } finally {
    for (const c of idle) c.destroy();
    await s.close();
  }
});
