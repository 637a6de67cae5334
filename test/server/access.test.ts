// Who may reach the server: content type, Host, Origin, the inference key and the control key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { createApp } from '../../src/server/app.ts';
import { accessWarnings, isLoopbackHost } from '../../src/server/access.ts';
import { defaultServerConfig, type ServerConfig } from '../../src/server/types.ts';
import { FakeEngine, FakeResidency, fakeModel } from './fakes.ts';
import { startTestServer } from './helpers.ts';

/** An app answering in memory (no socket), as if listening on `listenHost`. */
function appFor(listenHost: string, config: Partial<ServerConfig> = {}) {
  const residency = new FakeResidency();
  const { app, history } = createApp({ engine: new FakeEngine(), model: fakeModel, residency, config: { ...defaultServerConfig, ...config } }, { defaultMetrics: false, listenHost });
  history.stop();
  const call = (path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
    app.fetch(new Request(`http://x${path}`, { method: init.method ?? 'GET', headers: { host: '127.0.0.1:8000', ...init.headers }, ...(init.body !== undefined ? { body: init.body } : {}) }));
  const control = (body: unknown, headers: Record<string, string> = {}) =>
    call('/v1/residency/control', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { residency, call, control };
}

/** A raw POST over loopback with exactly these headers (fetch would add a content type of its own). */
function rawPost(url: string, path: string, headers: Record<string, string>, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: 'POST', headers: { 'content-length': String(Buffer.byteLength(body)), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (s: string) => (text += s));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('loopback names are told from others', () => {
  for (const h of ['localhost', 'LOCALHOST', 'a.localhost', '127.0.0.1', '127.9.9.9', '[::1]', '::1', '::ffff:127.0.0.1']) assert.ok(isLoopbackHost(h), h);
  for (const h of ['0.0.0.0', '10.0.0.1', 'evil.example', 'localhost.evil.example', '[::]', '128.0.0.1']) assert.ok(!isLoopbackHost(h), h);
});

test('the curl repro: control with no content type and a foreign Origin is refused and changes nothing', async () => {
  const residency = new FakeResidency();
  const s = await startTestServer({ residency });
  try {
    let r = await rawPost(s.url, '/v1/residency/control', { origin: 'http://evil.example' }, '{"freeze":true}');
    assert.equal(r.status, 403, r.body);
    assert.equal(JSON.parse(r.body).error.code, 'origin_not_allowed');
    r = await rawPost(s.url, '/v1/residency/control', {}, '{"freeze":true}');
    assert.equal(r.status, 415, 'no content type at all');
    assert.match(JSON.parse(r.body).error.message, /application\/json \(got none\)/);
    r = await rawPost(s.url, '/v1/residency/control', { 'content-type': 'text/plain' }, '{"freeze":true}');
    assert.equal(r.status, 415, 'text/plain: what a no-cors page can send');
    r = await rawPost(s.url, '/v1/completions', { 'content-type': 'application/jsonx' }, '{"prompt":"a"}');
    assert.equal(r.status, 415, 'a look-alike type');
    assert.equal(residency.frozen, false, 'nothing was applied');
    r = await rawPost(s.url, '/v1/residency/control', { 'content-type': 'application/json; charset=utf-8' }, '{"freeze":true}');
    assert.equal(r.status, 200);
    assert.equal(residency.frozen, true);
  } finally {
    await s.close();
  }
});

test('Origin: this server itself, loopback pages and --allowed-origins pass; other pages and "null" are 403', async () => {
  const { call } = appFor('127.0.0.1', { allowedOrigins: ['https://ops.example.com/'] });
  for (const origin of ['http://127.0.0.1:8000', 'http://localhost:3000', 'https://ops.example.com']) {
    assert.equal((await call('/v1/models', { headers: { origin } })).status, 200, origin);
  }
  for (const origin of ['http://evil.example', 'null', 'https://ops.example.com.evil.example', 'not a url']) {
    const r = await call('/v1/models', { headers: { origin } });
    assert.equal(r.status, 403, origin);
    assert.equal((await r.json()).error.code, 'origin_not_allowed');
  }
  assert.equal((await appFor('127.0.0.1', { allowedOrigins: ['*'] }).call('/v1/models', { headers: { origin: 'http://evil.example' } })).status, 200);
});

test('Host on a loopback listener: loopback names and --allowed-hosts only (DNS rebinding); any name on a non-loopback one', async () => {
  const { call } = appFor('127.0.0.1', { allowedHosts: ['proxy.internal'] });
  for (const host of ['127.0.0.1:8000', 'localhost:8000', '[::1]:8000', 'proxy.internal:8080', 'PROXY.internal']) assert.equal((await call('/health', { headers: { host } })).status, 200, host);
  for (const host of ['evil.example:8000', '10.0.0.7:8000']) {
    const r = await call('/health', { headers: { host } });
    assert.equal(r.status, 403, host);
    const e = (await r.json()).error;
    assert.equal(e.code, 'host_not_allowed');
    assert.match(e.message, /--allowed-hosts/);
  }
  assert.equal((await appFor('0.0.0.0').call('/health', { headers: { host: 'gpu-box.internal:8000' } })).status, 200);
  assert.equal((await appFor('127.0.0.1', { allowedHosts: ['*'] }).call('/health', { headers: { host: 'anything.example' } })).status, 200, "'*' opens every name");
  for (const bad of ['https://proxy.internal', 'proxy.internal:8080', 'proxy.internal/x', '']) {
    assert.throws(() => appFor('127.0.0.1', { allowedHosts: [bad] }), (e: Error) => /--allowed-hosts/.test(e.message), bad);
  }
});

test('the Host check does not follow CORS: --allowed-origins * (or a listed origin) opens no Host; a rebinding page cannot post control', async () => {
  for (const allowedOrigins of [['*'], ['http://evil.example:8000']]) {
    const a = appFor('127.0.0.1', { allowedOrigins });
    // A page at http://evil.example:8000 whose name now resolves to 127.0.0.1: same-origin to the browser.
    const r = await a.control({ freeze: true }, { host: 'evil.example:8000', origin: 'http://evil.example:8000' });
    assert.equal(r.status, 403, allowedOrigins.join());
    assert.equal((await r.json()).error.code, 'host_not_allowed');
    assert.equal(a.residency.frozen, false, 'nothing changed');
    assert.equal((await a.call('/v1/models', { headers: { host: 'evil.example:8000' } })).status, 403);
  }
});

test('control: off over HTTP on a non-loopback listener without --control-api-key; with one, only that key opens it', async () => {
  let a = appFor('0.0.0.0', { apiKey: 'infer' });
  let r = await a.control({ freeze: true }, { authorization: 'Bearer infer' });
  assert.equal(r.status, 403);
  assert.equal((await r.json()).error.code, 'control_disabled');
  assert.equal(a.residency.frozen, false);

  a = appFor('0.0.0.0', { apiKey: 'infer', controlApiKey: 'ctl' });
  assert.equal((await a.control({ freeze: true }, { authorization: 'Bearer infer' })).status, 401, 'the inference key does not open control');
  assert.equal(a.residency.frozen, false);
  r = await a.control({ freeze: true }, { authorization: 'Bearer ctl' });
  assert.equal(r.status, 200);
  assert.equal(a.residency.frozen, true);
  assert.equal((await a.call('/v1/models', { headers: { authorization: 'Bearer ctl' } })).status, 401, 'the control key does not open inference');
  assert.equal((await a.call('/v1/models', { headers: { authorization: 'Bearer infer' } })).status, 200);

  a = appFor('127.0.0.1');
  assert.equal((await a.control({ freeze: true })).status, 200, 'a loopback listener without keys: control as before');
});

test('a non-loopback listener without keys is warned about; a bad --allowed-origins entry is refused naming the flag', () => {
  assert.deepEqual(accessWarnings('127.0.0.1', {}), []);
  const lines = accessWarnings('0.0.0.0', {});
  assert.match(lines[0]!, /warning: listening on 0\.0\.0\.0 \(not loopback\) without --api-key/);
  assert.match(lines[1]!, /control over HTTP is off .*--control-api-key/);
  assert.deepEqual(accessWarnings('0.0.0.0', { apiKey: 'a', controlApiKey: 'b' }), []);
  for (const bad of ['evil.example', 'https://ops.example.com/path', 'ftp://x.example']) {
    assert.throws(() => appFor('127.0.0.1', { allowedOrigins: [bad] }), (e: Error) => /--allowed-origins/.test(e.message), bad);
  }
});

test('CORS: loopback pages by default on a loopback listener, and --allowed-origins pages (preflight and reply); OPTIONS is never a 404', async () => {
  const plain = appFor('127.0.0.1');
  for (const origin of ['http://localhost:3000', 'http://127.0.0.1:5173', 'http://[::1]:8080']) {
    const pre = await plain.call('/v1/completions', { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' } });
    assert.equal(pre.status, 204, origin);
    assert.equal(pre.headers.get('access-control-allow-origin'), origin, `a loopback page (${origin}) is granted`);
    assert.match(pre.headers.get('access-control-allow-headers') ?? '', /content-type/);
    const r = await plain.call('/v1/models', { headers: { origin } });
    assert.equal(r.headers.get('access-control-allow-origin'), origin);
  }
  // Not on a listener that is not loopback: there only --allowed-origins pages are granted.
  const open = appFor('0.0.0.0', { apiKey: 'k' });
  const pre0 = await open.call('/v1/completions', { method: 'OPTIONS', headers: { host: '10.0.0.7:8000', origin: 'http://localhost:3000', 'access-control-request-method': 'POST' } });
  assert.equal(pre0.headers.get('access-control-allow-origin'), null);
  assert.equal((await plain.call('/v1/models', { method: 'OPTIONS' })).status, 204, 'OPTIONS without an Origin');
  const listed = appFor('127.0.0.1', { allowedOrigins: ['https://ui.example.com'], apiKey: 'k' });
  const p2 = await listed.call('/v1/chat/completions', { method: 'OPTIONS', headers: { origin: 'https://ui.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' } });
  assert.equal(p2.status, 204, 'the preflight carries no key and is not refused for it');
  assert.equal(p2.headers.get('access-control-allow-origin'), 'https://ui.example.com');
  assert.match(p2.headers.get('access-control-allow-headers') ?? '', /authorization/);
  const r = await listed.call('/v1/models', { headers: { origin: 'https://ui.example.com', authorization: 'Bearer k' } });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), 'https://ui.example.com');
  assert.match(r.headers.get('access-control-expose-headers') ?? '', /x-ignored-fields/);
  assert.equal((await listed.call('/v1/models', { method: 'OPTIONS', headers: { origin: 'https://evil.example.com', 'access-control-request-method': 'GET' } })).status, 403);
  const star = appFor('127.0.0.1', { allowedOrigins: ['*'] });
  assert.equal((await star.call('/v1/models', { headers: { origin: 'https://any.example' } })).headers.get('access-control-allow-origin'), '*');
});
