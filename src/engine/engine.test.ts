// The engine on a small random model: continuous batching changes no one's tokens, seeded sampling
// repeats, cancel and EOS end requests, the residency hook sees every step, bad requests are refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCpuBackend } from '../backend/cpu/cpu-backend.ts';
import { syntheticModel } from '../backend/cpu/synthetic.ts';
import { createEngine } from './engine.ts';
import { generateGreedy, runToCompletion } from './complete.ts';
import type { GenerationEvent, GenerationRequest, SamplingParams } from './types.ts';
import type { StepReport } from './residency-hook.ts';

const model = syntheticModel({ seed: 11, vocabSize: 96, numExperts: 8, topK: 2, tieWordEmbeddings: false });
const backend = () => createCpuBackend(model.spec, model.weights, { placement: { hotPerLayer: 5 } });
const greedy = (maxTokens: number, extra: Partial<SamplingParams> = {}): SamplingParams => ({ temperature: 0, topP: 1, maxTokens, ignoreEos: true, ...extra });
const prompts = [[5, 6, 7], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [90], [12, 13, 14, 15, 16], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]];

test('continuous batching gives each request the tokens it gets alone', async () => {
  const alone = prompts.map((p, i) => generateGreedy(backend(), p, 6 + 3 * i));
  const sampled = { temperature: 0.9, topP: 0.8, seed: 77, maxTokens: 12, ignoreEos: true };
  const sampledAlone = (await runToCompletion(createEngine(backend()), [{ id: 's', promptIds: [3, 9, 27], sampling: sampled }])).get('s')!;
  // Small step budget and batch: prompts are chunked, requests wait, join and leave at different steps.
  const engine = createEngine(backend(), { scheduler: { maxRunning: 3, maxStepTokens: 8 } });
  const reqs: GenerationRequest[] = prompts.map((p, i) => ({ id: `r${i}`, promptIds: p, sampling: greedy(6 + 3 * i) }));
  reqs.splice(2, 0, { id: 's', promptIds: [3, 9, 27], sampling: sampled });
  const out = await runToCompletion(engine, reqs);
  prompts.forEach((_, i) => {
    assert.deepEqual(out.get(`r${i}`)!.tokens, alone[i], `request r${i}`);
    assert.equal(out.get(`r${i}`)!.reason, 'length');
  });
  assert.deepEqual(out.get('s')!.tokens, sampledAlone.tokens, 'sampled request');
  assert.equal(engine.running, 0);
  assert.equal(engine.queueDepth, 0);
});

test('greedy steps ask the backend for the argmax only (argmaxOnly); a step with a sampled or logprobs request takes the logits; the tokens are the same', async () => {
  // As a GPU backend answers argmaxOnly: no logits at all, so a runner that read them would fail.
  const spied = () => {
    const be = backend();
    const flags: boolean[] = [];
    const forward = be.forward.bind(be);
    be.forward = (input) => {
      flags.push(input.argmaxOnly === true);
      const out = forward(input);
      return input.argmaxOnly ? { ...out, logits: new Float32Array(0) } : out;
    };
    return { be, flags };
  };
  const g = spied();
  const out = await runToCompletion(createEngine(g.be), prompts.slice(0, 3).map((p, i) => ({ id: `g${i}`, promptIds: p, sampling: greedy(5) })));
  assert.ok(g.flags.length > 0 && g.flags.every((f) => f), 'every step of greedy requests');
  prompts.slice(0, 3).forEach((p, i) => assert.deepEqual(out.get(`g${i}`)!.tokens, generateGreedy(backend(), p, 5)));
  for (const extra of [{ temperature: 0.7, seed: 3 }, { logprobs: 2 }, { repetitionPenalty: 1.3 }]) {
    const m = spied();
    const mixed = await runToCompletion(createEngine(m.be), [{ id: 'g', promptIds: prompts[0]!, sampling: greedy(5) }, { id: 'x', promptIds: prompts[1]!, sampling: greedy(5, extra) }]);
    assert.ok(m.flags.includes(false), `a step with ${JSON.stringify(extra)} reads the logits`);
    assert.deepEqual(mixed.get('g')!.tokens, generateGreedy(backend(), prompts[0]!, 5));
  }
});

test('seeded sampling repeats; different seeds differ', async () => {
  const run = async (seed: number, topP: number): Promise<number[]> =>
    (await runToCompletion(createEngine(backend()), [{ id: 'a', promptIds: [8, 9], sampling: { temperature: 1.5, topP, seed, maxTokens: 24, ignoreEos: true } }])).get('a')!.tokens;
  for (const topP of [1, 0.7]) {
    const a = await run(1, topP);
    assert.deepEqual(await run(1, topP), a);
    assert.notDeepEqual(await run(2, topP), a);
  }
});

test('events arrive in order and end with one done; EOS and stop ids end a request without being emitted', async () => {
  const tokens = generateGreedy(backend(), [20, 21, 22], 8);
  const stopAt = tokens.findIndex((t, i) => tokens.indexOf(t) === i && i >= 2);
  const stopId = tokens[stopAt]!;
  const events: GenerationEvent[] = [];
  const engine = createEngine(createCpuBackend({ ...model.spec, eosTokenIds: [stopId] }, model.weights));
  await new Promise<void>((resolve) => engine.submit({ id: 'e', promptIds: [20, 21, 22], sampling: { temperature: 0, topP: 1, maxTokens: 8 } }, (ev) => {
    events.push(ev);
    if (ev.type === 'done') resolve();
  }));
  const emitted = events.filter((e) => e.type === 'token');
  assert.deepEqual(emitted.map((e) => e.type === 'token' && e.index), [...Array(stopAt).keys()]);
  assert.deepEqual(emitted.map((e) => e.type === 'token' && e.tokenId), tokens.slice(0, stopAt));
  const done = events.at(-1)!;
  assert.equal(done.type, 'done');
  assert.equal(events.filter((e) => e.type === 'done').length, 1);
  assert.ok(done.type === 'done' && done.reason === 'stop' && done.completionTokens === stopAt && done.promptTokens === 3);
  assert.ok(done.type === 'done' && done.timeToFirstToken !== undefined && done.timeToFirstToken >= 0);

  const viaStopIds = await runToCompletion(createEngine(backend()), [{ id: 'x', promptIds: [20, 21, 22], sampling: greedy(8, { ignoreEos: false, stopTokenIds: [stopId] }) }]);
  assert.deepEqual(viaStopIds.get('x'), { tokens: tokens.slice(0, stopAt), reason: 'stop', timeToFirstToken: viaStopIds.get('x')!.timeToFirstToken, error: undefined });
  const ignored = await runToCompletion(createEngine(createCpuBackend({ ...model.spec, eosTokenIds: [stopId] }, model.weights)), [{ id: 'i', promptIds: [20, 21, 22], sampling: greedy(8) }]);
  assert.deepEqual(ignored.get('i')!.tokens, tokens, 'ignoreEos generates through EOS');
});

test('cancel ends a running request and a waiting one at the next step boundary', async () => {
  const b = backend();
  const engine = createEngine(b, { scheduler: { maxRunning: 1 } });
  const seen: number[] = [];
  let doneRunning: GenerationEvent | null = null;
  let doneWaiting: GenerationEvent | null = null;
  const running = engine.submit({ id: 'a', promptIds: [1, 2], sampling: greedy(60) }, (ev) => {
    if (ev.type === 'token') {
      seen.push(ev.tokenId);
      if (seen.length === 3) running.cancel();
    } else doneRunning = ev;
  });
  const waiting = engine.submit({ id: 'b', promptIds: [3], sampling: greedy(5) }, (ev) => {
    if (ev.type === 'done') doneWaiting = ev;
  });
  assert.equal(engine.queueDepth, 2);
  waiting.cancel();
  await engine.close();
  assert.equal(seen.length, 3);
  assert.deepEqual(doneRunning, { type: 'done', reason: 'cancelled', promptTokens: 2, completionTokens: 3, timeToFirstToken: (doneRunning as unknown as { timeToFirstToken: number }).timeToFirstToken });
  assert.deepEqual(doneWaiting, { type: 'done', reason: 'cancelled', promptTokens: 1, completionTokens: 0 });
  assert.throws(() => engine.submit({ id: 'c', promptIds: [1], sampling: greedy(1) }, () => {}), /closing/);
});

test('the residency hook decides counting and sees every step in order', async () => {
  const b = backend();
  const reports: StepReport[] = [];
  const asked: number[] = [];
  const hook = {
    countStep: (tokens: number) => (asked.push(tokens), tokens <= 2),
    afterStep: (r: StepReport) => void reports.push(r),
  };
  const engine = createEngine(b, { hook });
  await runToCompletion(engine, [
    { id: 'a', promptIds: [4, 5, 6, 7], sampling: greedy(5) },
    { id: 'b', promptIds: [8, 9, 10], sampling: greedy(3) },
  ]);
  assert.deepEqual(reports.map((r) => r.step), [...reports.keys()]);
  assert.deepEqual(reports.map((r) => r.tokens), asked);
  assert.deepEqual(asked, [7, 2, 2, 1, 1]); // prefill both, decode both twice, then a alone
  const picks = reports.filter((r) => r.counted).reduce((n, r) => n + r.tokens, 0) * model.spec.numLayers * model.spec.topK;
  assert.equal(b.readCounter().reduce((n, v) => n + v, 0), picks);
  assert.ok(reports.every((r) => r.durationNs > 0));
});

test('a failing hook ends the requests with an error and the engine carries on', async () => {
  const errors: string[] = [];
  let fail = true;
  const hook = { countStep: () => true, afterStep: () => { if (fail) throw new Error('drain exploded'); } };
  const engine = createEngine(backend(), { hook, onError: (e) => void errors.push(e.message) });
  const first = await runToCompletion(engine, [{ id: 'a', promptIds: [1, 2], sampling: greedy(5) }]);
  assert.equal(first.get('a')!.reason, 'error');
  assert.equal(first.get('a')!.error, 'drain exploded');
  assert.deepEqual(errors, ['drain exploded']);
  fail = false;
  const second = await runToCompletion(engine, [{ id: 'b', promptIds: [1, 2], sampling: greedy(5) }]);
  assert.equal(second.get('b')!.reason, 'length');
  assert.equal(second.get('b')!.tokens.length, 5);
});

test('the loop yields to the event loop between steps', async () => {
  let steps = 0;
  let firedAtStep = -1;
  const engine = createEngine(backend(), { onStep: () => void steps++ });
  await new Promise<void>((resolve) => engine.submit({ id: 'a', promptIds: [1], sampling: greedy(40) }, (ev) => {
    if (ev.type === 'token' && ev.index === 0) setImmediate(() => (firedAtStep = steps));
    if (ev.type === 'done') resolve();
  }));
  assert.equal(steps, 40);
  assert.ok(firedAtStep >= 1 && firedAtStep <= 2, `an immediate queued at step 1 ran after step ${firedAtStep}`);
});

test('bad requests are refused with the field named; a full queue refuses more', () => {
  const engine = createEngine(backend(), { scheduler: { maxWaiting: 1 } });
  const ok = (id: string): GenerationRequest => ({ id, promptIds: [1], sampling: greedy(2) });
  assert.throws(() => engine.submit({ ...ok('x'), promptIds: [] }, () => {}), /promptIds: expected a non-empty/);
  assert.throws(() => engine.submit({ ...ok('x'), promptIds: [1, 96] }, () => {}), /promptIds\[1\]: 96 is not a token id/);
  assert.throws(() => engine.submit({ ...ok('x'), sampling: greedy(0) }, () => {}), /sampling.maxTokens/);
  assert.throws(() => engine.submit({ ...ok('x'), sampling: { ...greedy(2), topP: 0 } }, () => {}), /sampling.topP/);
  assert.throws(() => engine.submit({ ...ok('x'), sampling: { ...greedy(2), temperature: -1 } }, () => {}), /sampling.temperature/);
  engine.submit(ok('a'), () => {});
  assert.throws(() => engine.submit(ok('b'), () => {}), (e: Error & { code?: string }) => e.code === 'NOT_AVAILABLE');
  return engine.close();
});
