// Hostile clients: unpaired surrogates, stalled headers and bodies (slowloris), too many connections.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, Socket } from 'node:net';
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
    const silent = await heldFor(s.url, '', 5000); // node times headers from their first byte only
    assert.ok(silent.closed && silent.ms < 2500, `a socket that sent nothing was held ${silent.ms.toFixed(0)} ms`);
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

/** A raw connection to `url` (from `localAddress`, default 127.0.0.1); resolves once connected. */
function idleSocket(url: string, localAddress = '127.0.0.1'): Promise<Socket & { closedAt?: number }> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const c: Socket & { closedAt?: number } = connect({ port: Number(port), host: '127.0.0.1', localAddress }, () => resolve(c));
    c.on('close', () => { c.closedAt = performance.now(); });
    c.on('error', (e) => reject(e));
  });
}

test('idle sockets past the cap do not lock new clients out: the longest-idle connection makes room (1,100 idle sockets locked everyone out for ~10 s)', async () => {
  const s = await startTestServer({ config: { maxConnections: 64 } });
  const held: Socket[] = [];
  try {
    for (let i = 0; i < 200; i++) held.push(await idleSocket(s.url).catch(() => new Socket()));
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    const r = await fetch(`${s.url}/health`);
    assert.equal(r.status, 200);
    assert.ok(performance.now() - t0 < 1000, `answered after ${(performance.now() - t0).toFixed(0)} ms`);
    const open = held.filter((c) => (c as { closedAt?: number }).closedAt === undefined).length;
    assert.ok(open <= 64, `${open} idle sockets still held`);
  } finally {
    for (const c of held) c.destroy();
    await s.close();
  }
});

test('connections with a request in progress are never the ones closed: past the cap with every one busy, a new connection is closed at once', async () => {
  const s = await startTestServer({ engine: new FakeEngine({ stepMs: 5 }), config: { maxConnections: 3 } });
  try {
    const streams = [0, 1, 2].map(() => post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 150, stream: true, ignore_eos: true }).then((r) => readSse(r)));
    await new Promise((r) => setTimeout(r, 150));
    const extra = await heldFor(s.url, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 3000);
    assert.ok(extra.closed && extra.reply === '', `the 4th connection was ${extra.closed ? 'closed' : 'kept'} after ${extra.ms.toFixed(0)} ms, reply ${JSON.stringify(extra.reply.slice(0, 40))}`);
    for (const st of await Promise.all(streams)) assert.equal(st.done, true, 'every stream finished');
    assert.equal((await fetch(`${s.url}/health`)).status, 200, 'serving again once they end');
  } finally {
    await s.close();
  }
});

test('one client holds at most maxConnectionsPerClient connections: its own longest-idle ones make room, other clients are untouched', async () => {
  const s = await startTestServer({ config: { maxConnectionsPerClient: 4 } });
  const mine: (Socket & { closedAt?: number })[] = [];
  const theirs: (Socket & { closedAt?: number })[] = [];
  try {
    for (let i = 0; i < 3; i++) theirs.push(await idleSocket(s.url, '127.0.0.3'));
    for (let i = 0; i < 10; i++) mine.push(await idleSocket(s.url, '127.0.0.2'));
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(mine.map((c) => c.closedAt === undefined), [false, false, false, false, false, false, true, true, true, true], 'the oldest six were closed');
    assert.ok(theirs.every((c) => c.closedAt === undefined), 'another client kept its connections');
  } finally {
    for (const c of [...mine, ...theirs]) c.destroy();
    await s.close();
  }
});
