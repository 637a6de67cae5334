// The op timer (bench:cpu --ops): a backend with one computes the same bytes as one without, at 1 and 2 threads, and
// the timer holds each op the step ran, keyed as documented, counted only while on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCpuBackend } from './cpu-backend.ts';
import { OpTimer } from './op-timer.ts';
import { syntheticModel } from './synthetic.ts';
import { recordRun } from './test-helpers.ts';

test('op timer: same results with and without it (1 and 2 threads); each op of a step timed once per call, none while off', async () => {
  const { spec, weights } = syntheticModel({ seed: 3 });
  const prompts = [[[1, 2, 3, 4, 5], [6, 7, 8]], [[9], [10]]];
  const sched = { swapsPerStep: 0, seed: 1, token: (f: number, i: number, s: number) => (f * 7 + i + s) % spec.vocabSize, counted: () => true };
  for (const threads of [1, 2]) {
    const plain = createCpuBackend(spec, weights, { threads });
    const timer = new OpTimer();
    const timed = createCpuBackend(spec, weights, { threads, opTimer: timer });
    try {
      await Promise.all([plain.ready(), timed.ready()]);
      const a = recordRun(plain, prompts, 3, sched);
      const b = recordRun(timed, prompts, 3, sched);
      assert.ok(Buffer.concat(a.steps).equals(Buffer.concat(b.steps)), `threads ${threads}: logits and routing unchanged`);
      const keys = [...timer.ms.keys()];
      for (const k of ['experts', 'combine', 'attention']) assert.ok(keys.includes(k), `threads ${threads}: ${k} timed (${keys.join(', ')})`);
      assert.ok(keys.some((k) => /^linear \d+x\d+ r\d+$/.test(k)), 'linear layers keyed by shape and rows');
      const calls = timer.calls.get('combine')!;
      timer.on = false;
      recordRun(timed, [[[11, 12]]], 2, sched);
      assert.equal(timer.calls.get('combine'), calls, 'nothing counted while off');
    } finally {
      plain.dispose();
      timed.dispose();
    }
  }
});
