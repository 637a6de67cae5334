// The CPU backend with worker threads: every result bit-identical to the single-threaded reference
// (logits, routing, counter, bank digests) on the synthetic and the real model, at batch 1 and 4, with
// hot/cold maps and swaps between steps, oversubscribed too (3 threads on a 2-core machine); workers
// never keep the process alive; bad thread counts get a clear error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, type CpuBackend } from '../cpu-backend.ts';
import { syntheticModel } from '../synthetic.ts';
import { bytesOf as bytes, randomMap, recordRun } from '../test-helpers.ts';
import { loadModel } from '../../../model/load.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import type { ModelWeights } from '../../../model/weights.ts';
import type { BankPlacement } from '../../slot-tables.ts';
import { ResidencyError } from '../../../errors.ts';
import { TINY_MOE_MODEL as MODEL, tinyMoeFile } from '../../../../fixtures/fixture-paths.ts';


/** Everything a run produces, as bytes: per step logits, routing and weights; then counter and digest. */
interface Trace {
  steps: Buffer[];
  counter: Buffer;
  digest: string;
  /** Row chunks the workers computed (they must take part for the comparison to mean anything). */
  workerChunks: number;
}

/**
 * On one backend, for each batch of prompts in turn: prefill them (one chunk each), then `decode` steps
 * feeding a fixed token schedule, swapping random hot/cold rows between steps when the map has both.
 */
async function trace(spec: ModelSpec, weights: ModelWeights, threads: number, placement: BankPlacement | undefined, batches: number[][][], decode: number): Promise<Trace> {
  const b: CpuBackend = createCpuBackend(spec, weights, { threads, placement });
  try {
    await b.ready();
    assert.equal(b.threads, threads);
    const run = recordRun(b, batches, decode, { swapsPerStep: 5, seed: 99, token: (f, i, s) => f * 7 + i * 13 + s, counted: (i) => i % 2 === 0 });
    return { ...run, workerChunks: b.workerChunks() };
  } finally {
    b.dispose();
  }
}

function assertSameTrace(got: Trace, want: Trace, what: string): void {
  assert.equal(got.steps.length, want.steps.length);
  got.steps.forEach((s, i) => assert.ok(s.equals(want.steps[i]!), `${what}: step ${i} differs from one thread`));
  assert.ok(got.counter.equals(want.counter), `${what}: counter differs from one thread`);
  assert.equal(got.digest, want.digest, `${what}: bank digest differs from one thread`);
}

/** Compares threads 2 and 3 with 1 over placements x batches; checks that the workers took part. */
async function compareThreads(spec: ModelSpec, weights: ModelWeights, placements: [string, BankPlacement | undefined][], batches: number[][][], decode: number): Promise<void> {
  let workerChunks = 0;
  for (const [name, placement] of placements) {
    const want = await trace(spec, weights, 1, placement, batches, decode);
    assert.equal(want.workerChunks, 0);
    for (const threads of [2, 3]) {
      const got = await trace(spec, weights, threads, placement, batches, decode);
      assertSameTrace(got, want, `${name}, batches of ${batches.map((p) => p.length).join(' then ')}, ${threads} threads`);
      workerChunks += got.workerChunks;
    }
  }
  assert.ok(workerChunks > 0, 'the workers computed no rows: the comparison tested one thread against itself');
}

test('synthetic model: threads 2 and 3 are bit-identical to 1 thread (batch 1 and 4, maps, swaps)', async () => {
  const { spec, weights } = syntheticModel({ seed: 11, numExperts: 16, topK: 4, vocabSize: 1024, hiddenSize: 64, headDim: 16, expertIntermediate: 24, numLayers: 3 });
  const placements: [string, BankPlacement | undefined][] = [
    ['all hot', undefined],
    ['5 hot', { hotPerLayer: 5 }],
    ['shuffled map, 10 hot', randomMap(spec, 10, 3)],
    ['all cold', { hotPerLayer: 0 }],
  ];
  const batches = [[[3, 1, 4, 1, 5, 9, 2, 6]], [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3]]];
  await compareThreads(spec, weights, placements, batches, 6);
});

test('real model: threads 2 and 3 are bit-identical to 1 thread on parity prompts (batch 1 and 4, 49 hot, swaps)', async () => {
  const { spec, weights } = await loadModel(MODEL);
  const cases = (JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: { prompt_ids: number[] }[] }).cases.map((c) => c.prompt_ids);
  const pick = [cases[0]!, cases[5 % cases.length]!, cases[10 % cases.length]!, cases[20 % cases.length]!].map((p) => p.slice(0, 24));
  const placements: [string, BankPlacement | undefined][] = [
    ['all hot', undefined],
    ['49 hot', { hotPerLayer: 49 }],
    ['shuffled map, 40 hot', randomMap(spec, 40, 5)],
  ];
  await compareThreads(spec, weights, placements, [pick.slice(0, 1), pick], 4);
});

test('workers never keep the process alive, disposed or not', () => {
  const dir = mkdtempSync(join(tmpdir(), 'residency-threads-'));
  try {
    const script = join(dir, 'child.mts');
    const backend = new URL('../cpu-backend.ts', import.meta.url).href;
    const synthetic = new URL('../synthetic.ts', import.meta.url).href;
    writeFileSync(
      script,
      `import { createCpuBackend } from ${JSON.stringify(backend)};
import { syntheticModel } from ${JSON.stringify(synthetic)};
const { spec, weights } = syntheticModel({ vocabSize: 4096, hiddenSize: 64 });
for (const dispose of [true, false]) {
  const b = createCpuBackend(spec, weights, { threads: 2 });
  b.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0, blockTable: [0] }], count: true });
  if (dispose) b.dispose();
}
console.log('done');
`,
    );
    const r = spawnSync(process.execPath, ['--import', 'tsx', script], { encoding: 'utf8', timeout: 30_000, cwd: process.cwd() });
    assert.equal(r.signal, null, `the child did not exit by itself (killed by ${r.signal}): ${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /done/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a disposed backend keeps computing on the main thread, bit-identical', () => {
  const { spec, weights } = syntheticModel({ seed: 5, vocabSize: 2048, hiddenSize: 64 });
  const run = (b: CpuBackend): Buffer => {
    return bytes(b.forward({ chunks: [{ seq: 0, tokens: [4, 5, 6], startPos: 0, blockTable: [0] }], count: false }).logits);
  };
  const one = createCpuBackend(spec, weights, { threads: 1 });
  const two = createCpuBackend(spec, weights, { threads: 2 });
  const want = run(one);
  assert.ok(run(two).equals(want));
  two.dispose();
  assert.ok(run(two).equals(want));
});

test('bad thread counts get a clear error', () => {
  const { spec, weights } = syntheticModel();
  for (const threads of [0, 1.5, 65, NaN]) {
    assert.throws(() => createCpuBackend(spec, weights, { threads }), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_ARGUMENT' && /threads .*expected an integer in \[1, 64\]/.test(e.message));
  }
  const saved = process.env.RESIDENCY_CPU_THREADS;
  try {
    process.env.RESIDENCY_CPU_THREADS = 'many';
    assert.throws(() => createCpuBackend(spec, weights), /RESIDENCY_CPU_THREADS many: expected an integer in \[1, 64\]/);
    process.env.RESIDENCY_CPU_THREADS = '';
    assert.equal(createCpuBackend(spec, weights).threads, 1);
    process.env.RESIDENCY_CPU_THREADS = '2';
    const b = createCpuBackend(spec, weights);
    assert.equal(b.threads, 2);
    b.dispose();
  } finally {
    if (saved === undefined) delete process.env.RESIDENCY_CPU_THREADS;
    else process.env.RESIDENCY_CPU_THREADS = saved;
  }
});
