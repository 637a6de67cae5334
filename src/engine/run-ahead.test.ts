// Run-ahead decoding (EngineOptions.runAhead, Backend.submit, FED_TOKEN) on the CPU backend made lazy: a
// submitted step computes only when it is waited for, as a device finishes it later, and a block copy first
// finishes what was submitted, as the device's stream order does. Greedy requests get the tokens they get step by step,
// whatever ends them; the steps after the first decode one feed their tokens; counting and reports stay whole.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FED_TOKEN, type Backend, type StepInput, type StepOutput } from '../backend/backend.ts';
import { createCpuBackend } from '../backend/cpu/cpu-backend.ts';
import { syntheticModel } from '../backend/cpu/synthetic.ts';
import type { ModelSpec } from '../model/spec.ts';
import { createEngine } from './engine.ts';
import { generateGreedy, runToCompletion } from './complete.ts';
import type { GenerationEvent, GenerationRequest, SamplingParams } from './types.ts';
import type { StepReport } from './residency-hook.ts';
import { DirectSequences } from '../backend/sequences.ts';

const model = syntheticModel({ seed: 11, vocabSize: 96, numExperts: 8, topK: 2, tieWordEmbeddings: false });
const greedy = (maxTokens: number, extra: Partial<SamplingParams> = {}): SamplingParams => ({ temperature: 0, topP: 1, maxTokens, ignoreEos: true, ...extra });
const prompts = [[5, 6, 7], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [90], [12, 13, 14, 15, 16], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]];

/** The CPU backend with a lazy submit; `inputs` logs every step submitted or run. */
function lazy(spec: ModelSpec = model.spec) {
  const be = createCpuBackend(spec, model.weights, { placement: { hotPerLayer: 5 } });
  const queue: { input: StepInput; out?: StepOutput }[] = [];
  const inputs: StepInput[] = [];
  const forward = be.forward.bind(be);
  const flush = (): void => {
    for (const q of queue.splice(0)) q.out = forward(q.input);
  };
  be.forward = (input) => {
    flush();
    inputs.push(input);
    return forward(input);
  };
  const copy = be.copyBlocks.bind(be);
  be.copyBlocks = (pairs) => {
    flush();
    copy(pairs);
  };
  let unwaited = 0;
  const submit = (input: StepInput) => {
    const q: { input: StepInput; out?: StepOutput } = { input };
    queue.push(q);
    inputs.push(input);
    unwaited++;
    let waited = false;
    return {
      wait: (): StepOutput => {
        if (!waited) unwaited--;
        waited = true;
        while (!q.out) queue.length > 0 ? (queue[0]!.out = forward(queue.shift()!.input)) : assert.fail('a step waited for was never submitted');
        return q.out;
      },
    };
  };
  const backend: Backend = Object.assign(be, { submit });
  return { backend, inputs, unwaited: () => unwaited, fedSteps: () => inputs.filter((i) => i.chunks.some((c) => c.tokens[0] === FED_TOKEN)).length };
}

const alone = (p: number[], n: number): number[] => generateGreedy(createCpuBackend(model.spec, model.weights), p, n);

test('run-ahead: batched greedy requests get their own tokens; decode steps after the first feed them on the backend', async () => {
  const l = lazy();
  const engine = createEngine(l.backend, { scheduler: { maxRunning: 3, maxStepTokens: 8 } });
  const out = await runToCompletion(engine, prompts.map((p, i) => ({ id: `r${i}`, promptIds: p, sampling: greedy(6 + 3 * i) })));
  prompts.forEach((p, i) => {
    assert.deepEqual(out.get(`r${i}`)!.tokens, alone(p, 6 + 3 * i), `request r${i}`);
    assert.equal(out.get(`r${i}`)!.reason, 'length');
  });
  assert.ok(l.fedSteps() >= 10, `fed steps: ${l.fedSteps()}`);
  assert.equal(engine.running, 0);
  // The step run past the last request's end was finished before its done event reached anyone (who may dispose the backend).
  assert.equal(l.unwaited(), 0);
});

test('run-ahead: off, or a sampled request in the batch, runs every step through forward with host tokens', async () => {
  for (const [opts, reqs] of [
    [{ runAhead: false }, [{ id: 'a', promptIds: [3, 4], sampling: greedy(8) }]],
    [{}, [{ id: 'a', promptIds: [3, 4], sampling: greedy(8) }, { id: 's', promptIds: [9], sampling: { temperature: 0.8, topP: 1, seed: 5, maxTokens: 8, ignoreEos: true } }]],
  ] as [{ runAhead?: boolean }, GenerationRequest[]][]) {
    const l = lazy();
    const out = await runToCompletion(createEngine(l.backend, opts), reqs);
    assert.equal(l.fedSteps(), 0);
    assert.deepEqual(out.get('a')!.tokens, alone([3, 4], 8));
  }
});

test('run-ahead: EOS, a stop id and a cancel end a request where they do step by step; the step run past it is dropped', async () => {
  const tokens = alone([20, 21, 22], 12);
  const stopAt = tokens.findIndex((t, i) => tokens.indexOf(t) === i && i >= 3);
  const stopId = tokens[stopAt]!;
  const spec = { ...model.spec, eosTokenIds: [stopId] };
  for (const runAhead of [true, false]) {
    // Alone, so the step after the cancel is already running ahead when it comes.
    const l = lazy(spec);
    const engine = createEngine(l.backend, { runAhead });
    const seen: number[] = [];
    const done: GenerationEvent[] = [];
    const c = engine.submit({ id: 'c', promptIds: [1, 2], sampling: greedy(40) }, (ev) => {
      if (ev.type === 'token' && seen.push(ev.tokenId) === 6) c.cancel();
      if (ev.type === 'done') done.push(ev);
    });
    await engine.close();
    assert.equal(seen.length, 6, 'no token after the cancel');
    assert.equal(done[0]?.type === 'done' && done[0].reason, 'cancelled');
    assert.equal(l.fedSteps() > 0, runAhead);
    const out = await runToCompletion(createEngine(lazy(spec).backend, { runAhead }), [
      { id: 'eos', promptIds: [20, 21, 22], sampling: { temperature: 0, topP: 1, maxTokens: 12 } },
      { id: 'stop', promptIds: [20, 21, 22], sampling: greedy(12, { stopTokenIds: [tokens[2]!] }) },
      { id: 'long', promptIds: [7], sampling: greedy(20) },
    ]);
    assert.deepEqual(out.get('eos'), { tokens: tokens.slice(0, stopAt), reason: 'stop', timeToFirstToken: out.get('eos')!.timeToFirstToken, error: undefined }, `runAhead ${runAhead}`);
    assert.deepEqual(out.get('stop')!.tokens, tokens.slice(0, 2));
    assert.deepEqual(out.get('long')!.tokens, alone([7], 20));
  }
});

test('run-ahead: the hook sees every step in order, dropped ones too, and the counter holds exactly their counted picks', async () => {
  const l = lazy();
  const reports: StepReport[] = [];
  const hook = { countStep: (n: number) => n <= 2, afterStep: (r: StepReport) => void reports.push(r) };
  const engine = createEngine(l.backend, { hook });
  await runToCompletion(engine, [
    { id: 'a', promptIds: [4, 5, 6, 7], sampling: greedy(9) },
    { id: 'b', promptIds: [8, 9, 10], sampling: greedy(5) },
  ]);
  await engine.close(); // the step run past the last request's end finishes after its done event
  assert.deepEqual(reports.map((r) => r.step), [...reports.keys()]);
  assert.equal(reports.length, l.inputs.length, 'one report a step run');
  assert.deepEqual(reports.map((r) => r.tokens), l.inputs.map((i) => i.chunks.length === 1 && i.chunks[0]!.tokens.length > 1 ? i.chunks[0]!.tokens.length : i.chunks.reduce((n, c) => n + c.tokens.length, 0)));
  const picks = reports.filter((r) => r.counted).reduce((n, r) => n + r.tokens, 0) * model.spec.numLayers * model.spec.topK;
  assert.equal(l.backend.readCounter().reduce((n, v) => n + v, 0), picks);
  assert.ok(reports.every((r) => r.durationNs > 0));
});

test('a fed token with no argmax from the step just before is refused, naming the sequence', () => {
  const be = new DirectSequences(createCpuBackend(model.spec, model.weights));
  be.open(0, 16);
  be.open(1, 16);
  assert.throws(() => be.forward({ chunks: [{ seq: 0, tokens: [FED_TOKEN], startPos: 0 }], count: false }), /seq 0 has a fed token .* not an argmaxOnly step/);
  be.forward({ chunks: [{ seq: 0, tokens: [3, 4], startPos: 0 }], count: false, argmaxOnly: true });
  assert.throws(() => be.forward({ chunks: [{ seq: 1, tokens: [FED_TOKEN], startPos: 0 }], count: false }), /seq 1 has a fed token/);
  be.forward({ chunks: [{ seq: 0, tokens: [3, 4], startPos: 0 }], count: false, argmaxOnly: true });
  assert.throws(() => be.forward({ chunks: [{ seq: 0, tokens: [FED_TOKEN, 5], startPos: 2 }], count: false }), /2 tokens \(a fed chunk has one\)/);
});

test('run-ahead: a backend refusing the step run ahead leaves the requests running step by step, with their own tokens', async () => {
  const l = lazy();
  const submit = l.backend.submit!.bind(l.backend);
  let refused = 0;
  l.backend.submit = (input) => {
    if (input.chunks.some((c) => c.tokens[0] === FED_TOKEN)) {
      refused++;
      throw new Error('no fed tokens here');
    }
    return submit(input);
  };
  const out = await runToCompletion(createEngine(l.backend), [{ id: 'a', promptIds: [3, 4], sampling: greedy(8) }, { id: 'b', promptIds: [9], sampling: greedy(5) }]);
  assert.ok(refused > 0);
  assert.deepEqual(out.get('a'), { tokens: alone([3, 4], 8), reason: 'length', timeToFirstToken: out.get('a')!.timeToFirstToken, error: undefined });
  assert.deepEqual(out.get('b')!.tokens, alone([9], 5));
});
