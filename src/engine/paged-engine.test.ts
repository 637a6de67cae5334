// The engine on a paged backend (the fake that reads its context back through the block tables): the same tokens
// with and without prefix caching, with a pool small enough to preempt, run ahead or not; residency counting weighs
// a prefix hit as the prompt it stands for; a prompt the pool cannot hold is refused; and a leak test: 10,000
// requests of random lengths, cancellations and preemptions, ending with every block free.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createEngine } from './engine.ts';
import { runToCompletion } from './complete.ts';
import { pagedFakeBackend, pagedFakeNext, PAGED_FAKE_VOCAB } from './paged-fake-backend.ts';
import type { GenerationRequest } from './types.ts';
import { mulberry32 } from '../util/rng.ts';

const greedy = (id: string, promptIds: number[], maxTokens: number): GenerationRequest => ({ id, promptIds, sampling: { temperature: 0, topP: 1, maxTokens, ignoreEos: true } });

/** The tokens the fake gives when its cache reads back right. */
function expected(prompt: readonly number[], n: number): number[] {
  const all = [...prompt];
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = pagedFakeNext(all);
    out.push(t);
    all.push(t);
  }
  return out;
}

function prompts(seed: number, n: number, shared: number[][]): number[][] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, () => {
    const head = rand() < 0.7 ? shared[Math.floor(rand() * shared.length)]! : [];
    return [...head, ...Array.from({ length: 1 + Math.floor(rand() * 30) }, () => Math.floor(rand() * PAGED_FAKE_VOCAB))];
  });
}

test('paged engine: the same tokens with and without prefix caching, preempting in a small pool, run ahead or not', async () => {
  const shared = [Array.from({ length: 32 }, (_, i) => (i * 7) % 90), Array.from({ length: 20 }, (_, i) => (i * 3 + 1) % 90)];
  const ps = prompts(1, 40, shared);
  // Block-aligned prompts cached whole (copy-on-write of their last block): the same 16 tokens three times.
  for (let i = 0; i < 3; i++) ps.push(shared[0]!.slice(0, 16));
  const reqs = ps.map((p, i) => greedy(`r${i}`, p, 5 + (i % 17)));
  for (const caching of [false, true]) {
    for (const submit of [false, true]) {
      for (const blocks of [400, 24]) {
        const be = pagedFakeBackend(blocks, 4, { submit });
        const engine = createEngine(be, { prefixCaching: caching, scheduler: { maxRunning: 16, maxStepTokens: 32, maxWaiting: 100 } });
        const got = await runToCompletion(engine, reqs);
        const what = `caching ${caching}, submit ${submit}, ${blocks} blocks`;
        reqs.forEach((r, i) => assert.deepEqual(got.get(r.id)!.tokens, expected(ps[i]!, r.sampling.maxTokens), `${what}: request ${i}`));
        const kv = engine.kvCache!;
        assert.equal(kv.freeBlocks, blocks, `${what}: every block free`);
        if (blocks === 24) assert.ok(kv.preemptions > 0, `${what}: preempted`);
        if (caching) assert.ok(kv.prefixHits > 0, `${what}: prefix hits`);
        else assert.equal(kv.prefixHits, 0);
        if (caching && blocks === 400) assert.ok(be.copies > 0, `${what}: a cached last block copied`);
        await engine.close();
      }
    }
  }
});

test('a prefix hit is counted as the prompt it stands for: residency counting stays decode-only', async () => {
  const be = pagedFakeBackend(64, 4);
  const seen: number[] = [];
  const hook = { countStep: (t: number) => (seen.push(t), t <= 8), afterStep: () => {} };
  const engine = createEngine(be, { hook, scheduler: { maxRunning: 4, maxStepTokens: 64 } });
  const p = Array.from({ length: 40 }, (_, i) => i % 90);
  await runToCompletion(engine, [greedy('a', p, 1)]);
  seen.length = 0;
  // The same 40 tokens plus 2: 40 found cached, 2 computed; the step weighs 42 tokens, not 2.
  await runToCompletion(engine, [greedy('b', [...p, 1, 2], 1)]);
  assert.deepEqual(seen, [42]);
  assert.equal(engine.kvCache!.prefixHits, 40);
  await engine.close();
});

test('a prompt the pool cannot hold is refused; a request is ended by the pool\'s room as by max tokens', async () => {
  const be = pagedFakeBackend(4, 4);
  const engine = createEngine(be);
  assert.throws(() => engine.submit(greedy('big', Array.from({ length: 16 }, () => 1), 1), () => {}), /16 tokens leave no room to generate: the KV cache holds 16 positions/);
  const got = await runToCompletion(engine, [greedy('long', [1, 2, 3], 100)]);
  assert.equal(got.get('long')!.reason, 'length');
  assert.deepEqual(got.get('long')!.tokens, expected([1, 2, 3], 14), '16 positions computed (the last token emitted needs none)');
  assert.equal(engine.config.maxRunning, 4, 'default: as many sequences as the pool has blocks');
  await engine.close();
});

test('leak test: 10,000 requests of random lengths, cancellations and preemptions end with every block free', async () => {
  const rand = mulberry32(44);
  const be = pagedFakeBackend(96, 4, { submit: true });
  const engine = createEngine(be, { scheduler: { maxRunning: 24, maxStepTokens: 48, maxWaiting: 20_000 } });
  const shared = [Array.from({ length: 24 }, (_, i) => i), Array.from({ length: 9 }, (_, i) => 50 + i)];
  const ps = prompts(45, 10_000, shared);
  let done = 0;
  let wrong = 0;
  let cancelled = 0;
  await new Promise<void>((resolve) => {
    ps.forEach((p, i) => {
      const maxTokens = 1 + Math.floor(rand() * 40);
      const cancelAfter = rand() < 0.15 ? Math.floor(rand() * maxTokens) : -1;
      const want = expected(p, maxTokens);
      const tokens: number[] = [];
      const h = engine.submit(greedy(`r${i}`, p, maxTokens), (ev) => {
        if (ev.type === 'token') {
          tokens.push(ev.tokenId);
          if (tokens.length === cancelAfter) h.cancel();
          return;
        }
        if (ev.reason === 'cancelled') cancelled++;
        // Every token a client saw is the right one, cancelled or not.
        if (tokens.some((t, k) => t !== want[k]) || (ev.reason !== 'cancelled' && tokens.length !== maxTokens)) wrong++;
        if (++done === ps.length) resolve();
      });
      if (cancelAfter === 0 && i % 2 === 0) h.cancel(); // cancelled while waiting
    });
  });
  await engine.close();
  const kv = engine.kvCache!;
  assert.equal(wrong, 0, 'wrong tokens');
  assert.ok(cancelled > 500, `${cancelled} cancelled`);
  assert.ok(kv.preemptions > 100, `${kv.preemptions} preemptions`);
  assert.ok(kv.prefixHits > 0);
  assert.equal(kv.freeBlocks, 96, 'every block free');
  assert.equal(engine.running + engine.queueDepth, 0);
});
