// A deeply nested body (issue 46 item 1): refused at the nesting cap in linear time, so it never freezes
// the other streams; a 1 MB body at the cap is checked in milliseconds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { FakeEngine } from './fakes.ts';
import { post, readSse, startTestServer } from './helpers.ts';
import { MAX_BODY_NESTING } from '../../src/server/body.ts';

const nested = (depth: number) => `{"prompt":"hi","max_tokens":1,"x":${'['.repeat(depth)}${']'.repeat(depth)}}`;

test('a 50,000-deep body is a 400 naming the cap, answered at once; /health and a running stream do not wait for it', async () => {
  const s = await startTestServer({ engine: new FakeEngine({ stepMs: 2 }) });
  try {
    // Bodies over 16 KiB are checked in a worker thread: started by the first one (a second or two under tsx).
    assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 1, x: 'x'.repeat(20_000) })).status, 200);
    const stream = post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 200, stream: true, ignore_eos: true }).then((r) => readSse(r));
    const gaps: number[] = [];
    const t0 = performance.now();
    const deep = post(`${s.url}/v1/completions`, nested(50_000)).then(async (r) => ({ status: r.status, body: await r.json(), ms: performance.now() - t0 }));
    const health = (async () => {
      for (let i = 0; i < 20; i++) {
        const a = performance.now();
        assert.equal((await fetch(`${s.url}/health`)).status, 200);
        gaps.push(performance.now() - a);
      }
    })();
    const d = await deep;
    await health;
    const { done } = await stream;
    assert.equal(d.status, 400);
    assert.equal(d.body.error.code, 'too_deep');
    assert.match(d.body.error.message, new RegExp(`nests deeper than ${MAX_BODY_NESTING}`));
    assert.ok(d.ms < 2000, `the deep body took ${d.ms.toFixed(0)} ms`);
    assert.ok(Math.max(...gaps) < 1000, `/health took up to ${Math.max(...gaps).toFixed(0)} ms`);
    assert.equal(done, true, 'the running stream finished');
  } finally {
    await s.close();
  }
});

test('a body at the cap is accepted (its extra field ignored); one level more is refused', async () => {
  const s = await startTestServer();
  try {
    // The "x" field's arrays sit one level below the top-level object.
    assert.equal((await post(`${s.url}/v1/completions`, nested(MAX_BODY_NESTING - 1))).status, 200);
    const r = await post(`${s.url}/v1/completions`, nested(MAX_BODY_NESTING));
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.code, 'too_deep');
    // Brackets inside strings are text, not nesting.
    assert.equal((await post(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 1, x: '[{'.repeat(5000) })).status, 200);
  } finally {
    await s.close();
  }
});

/** CPU time this process's main thread has used, ns (Linux; undefined elsewhere). */
function mainThreadCpuNs(): number | undefined {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return undefined;
  }
}

test('a 1 MB body of half a million arrays at the cap costs the main thread what a 1 MB string does: it is parsed off the thread', async (t) => {
  if (mainThreadCpuNs() === undefined) return t.skip('needs /proc/self/task (Linux)');
  const s = await startTestServer({ config: { maxBodyBytes: 1 << 20 } });
  try {
    const unit = `${'['.repeat(MAX_BODY_NESTING - 2)}"\\ud83d\\ude00"${']'.repeat(MAX_BODY_NESTING - 2)}`;
    const items: string[] = [];
    let size = 64;
    while (size + unit.length + 1 < (1 << 20) - 64) { items.push(unit); size += unit.length + 1; }
    const arrays = `{"prompt":"hi","max_tokens":1,"x":[${items.join(',')}]}`;
    const flat = `{"prompt":"hi","max_tokens":1,"x":"${'a'.repeat(arrays.length - 40)}"}`;
    assert.ok(arrays.length > 1_000_000 && arrays.length <= 1 << 20 && flat.length <= 1 << 20, `${arrays.length} bytes`);
    const cpuOf = async (body: string) => {
      const before = mainThreadCpuNs()!;
      for (let i = 0; i < 3; i++) assert.equal((await post(`${s.url}/v1/completions`, body)).status, 200);
      return (mainThreadCpuNs()! - before) / 1e6;
    };
    await cpuOf(flat); // warm: the worker started, the code paths compiled
    await cpuOf(arrays);
    const flatMs = await cpuOf(flat);
    const arraysMs = await cpuOf(arrays);
    // Parsed on the main thread, each such body cost it ~100-170 ms of CPU here.
    assert.ok(arraysMs - flatMs < 60, `3 bodies of arrays cost the main thread ${arraysMs.toFixed(1)} ms of CPU, 3 flat ones ${flatMs.toFixed(1)} ms`);
  } finally {
    await s.close();
  }
});
