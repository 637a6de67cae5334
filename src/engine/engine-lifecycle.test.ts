// Every block the engine takes is given back, however its request ends: cancelled while waiting or mid-
// prefill, EOS as the first token, a stop id, the context end, a failing step. Many requests, few slots.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend } from '../backend/backend.ts';
import { createCpuBackend } from '../backend/cpu/cpu-backend.ts';
import { syntheticModel } from '../backend/cpu/synthetic.ts';
import { createEngine } from './engine.ts';
import { generateGreedy } from './complete.ts';
import type { FinishReason, GenerationEvent, SamplingParams } from './types.ts';

const model = syntheticModel({ seed: 11, vocabSize: 96, numExperts: 8, topK: 2, tieWordEmbeddings: false, maxPositions: 48 });
const greedy = (maxTokens: number, extra: Partial<SamplingParams> = {}): SamplingParams => ({ temperature: 0, topP: 1, maxTokens, ignoreEos: true, ...extra });

/** The CPU backend (a pool of 24 blocks of 4); `failAt` makes that forward call throw. */
function tracked(spec = model.spec, failAt = -1) {
  const b = createCpuBackend(spec, model.weights, { placement: { hotPerLayer: 5 }, kvCache: { blockSize: 4, blocks: 24 } });
  let forwards = 0;
  const backend: Backend = Object.assign(Object.create(b) as Backend, {
    forward: (input: Parameters<Backend['forward']>[0]) => {
      if (forwards++ === failAt) throw new Error('device fell over');
      return b.forward(input);
    },
  });
  return { backend };
}

/** Blocks still held after the engine closed. */
const held = (e: { kvCache: { numBlocks: number; freeBlocks: number } | null }): number => e.kvCache!.numBlocks - e.kvCache!.freeBlocks;

interface Outcome { tokens: number[]; reason?: FinishReason; events: number }

test('cancel storms: waiting, mid-prefill and decoding requests all release their sequence', async () => {
  const { backend } = tracked();
  const engine = createEngine(backend, { scheduler: { maxRunning: 3, maxStepTokens: 4, maxWaiting: 200 } });
  const out: Outcome[] = [];
  for (let i = 0; i < 60; i++) {
    const o: Outcome = { tokens: [], events: 0 };
    out.push(o);
    const prompt = Array.from({ length: 1 + (i % 11) }, (_, k) => (i * 7 + k) % 96);
    let h: { cancel(): void } | null = null;
    const cancelAfter = i % 4 === 0 ? -1 : i % 4; // some never cancelled; others after 1..3 tokens
    h = engine.submit({ id: `r${i}`, promptIds: prompt, sampling: greedy(6) }, (ev: GenerationEvent) => {
      o.events++;
      if (ev.type === 'token') {
        o.tokens.push(ev.tokenId);
        if (o.tokens.length === cancelAfter) h!.cancel();
      } else o.reason = ev.reason;
    });
    if (i % 5 === 1) h.cancel(); // cancelled while waiting
    if (i % 7 === 3) setImmediate(() => h!.cancel()); // cancelled mid-prefill (a 4-token step budget)
  }
  await engine.close();
  assert.equal(held(engine), 0, 'blocks held after every request ended');
  assert.ok(out.every((o) => o.reason !== undefined), 'every request got its done');
  assert.ok(out.some((o) => o.reason === 'cancelled') && out.some((o) => o.reason === 'length'));
  assert.equal(engine.running + engine.queueDepth, 0);
});

test('EOS as the first token, stop ids, the context end and a failing step all release their sequence', async () => {
  const first = generateGreedy(createCpuBackend(model.spec, model.weights), [9, 8, 7], 1)[0]!;
  const { backend } = tracked({ ...model.spec, eosTokenIds: [first] });
  const engine = createEngine(backend);
  const run = (promptIds: number[], sampling: SamplingParams) => new Promise<Outcome>((resolve) => {
    const o: Outcome = { tokens: [], events: 0 };
    engine.submit({ id: 'x', promptIds, sampling }, (ev) => {
      o.events++;
      if (ev.type === 'token') o.tokens.push(ev.tokenId);
      else resolve({ ...o, reason: ev.reason });
    });
  });
  const eos = await run([9, 8, 7], greedy(5, { ignoreEos: false }));
  assert.deepEqual([eos.reason, eos.tokens.length], ['stop', 0]);
  const stop = await run([9, 8, 7], greedy(5, { stopTokenIds: [first] }));
  assert.deepEqual([stop.reason, stop.tokens.length], ['stop', 0]);
  // A prompt one short of the context and a huge maxTokens: ends 'length' inside the KV cache it was given.
  const edge = await run(Array.from({ length: 47 }, (_, k) => k % 96), greedy(1000));
  assert.equal(edge.reason, 'length');
  assert.ok(edge.tokens.length >= 1 && 47 + edge.tokens.length <= 49, `${edge.tokens.length} tokens after a 47-token prompt in 48 positions`);
  await engine.close();
  assert.equal(held(engine), 0);

  const failing = tracked(model.spec, 2);
  const e2 = createEngine(failing.backend, { scheduler: { maxRunning: 2 } });
  const results = await Promise.all([0, 1, 2].map((i) => new Promise<Outcome>((resolve) => {
    const o: Outcome = { tokens: [], events: 0 };
    e2.submit({ id: `f${i}`, promptIds: [i + 1, i + 2], sampling: greedy(4) }, (ev) => {
      if (ev.type === 'token') o.tokens.push(ev.tokenId);
      else resolve({ ...o, reason: ev.reason });
    });
  })));
  assert.deepEqual(results.map((r) => r.reason), ['error', 'error', 'length']);
  await e2.close();
  assert.equal(held(e2), 0);
});
