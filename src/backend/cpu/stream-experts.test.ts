// Streamed experts (loadModel's streamExperts, what the CLI and server load): the banks read each routed expert
// from the shards straight into their rows, and give the bytes of banks filled from loaded experts (every step's
// logits and routing through random swaps, counter, digest; float32 and bf16-as-stored rows; one and two threads,
// SIMD on and off); a NaN or infinity in a streamed expert is refused when its row is written, naming the tensor.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCpuBackend } from './cpu-backend.ts';
import { TAKEN_EXPERT } from './banks.ts';
import { assertSameRecord, corruptCopy, randomMap, recordRun } from './test-helpers.ts';
import { loadModel } from '../../model/load.ts';
import { loadModelFor } from '../load-for.ts';
import { moeLayerIds } from '../../model/spec.ts';
import { ResidencyError } from '../../errors.ts';

const TINY = resolve(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url)));
const sched = { swapsPerStep: 3, seed: 5, token: (f: number, i: number, s: number) => f * 7 + i * 13 + s, counted: (i: number) => i % 3 !== 1 };
const batches = [[[1, 5, 9, 2]], [[3, 4], [7, 8, 10, 11, 12], [6]]];

describe('streamed experts', () => {
  for (const bf16 of ['float32', 'stored'] as const) {
    for (const [threads, simd] of [[1, false], [1, true], [2, false], [2, true]] as const) {
      it(`bf16 ${bf16}, ${threads} thread(s), SIMD ${simd ? 'on' : 'off'}: the same bytes as banks filled from loaded experts`, async () => {
        const loaded = await loadModel(TINY, { raw: false, bf16 });
        const streamed = await loadModel(TINY, { raw: false, bf16, streamExperts: true });
        const l0 = moeLayerIds(streamed.spec)[0]!;
        assert.ok(streamed.weights.layers[l0]!.experts.every((e) => e.stored && (e.gate as Float32Array).length === 0), 'no expert read at load');
        const placement = randomMap(loaded.spec, 40, 11);
        const a = createCpuBackend(loaded.spec, loaded.weights, { placement, threads, simd });
        const b = createCpuBackend(streamed.spec, streamed.weights, { placement, threads, simd, takeExperts: true });
        try {
          assert.equal(b.banks.rowSize, a.banks.rowSize, 'row format');
          assert.equal(b.banks.digest(), a.banks.digest(), 'boot digest');
          await Promise.all([a.ready(), b.ready()]);
          const want = recordRun(a, batches, 6, sched);
          assertSameRecord(recordRun(b, batches, 6, sched), want);
          assert.ok(streamed.weights.layers[l0]!.experts.every((e) => e === TAKEN_EXPERT), 'taken');
        } finally {
          a.dispose();
          b.dispose();
        }
      });
    }
  }

  it('the CPU load streams them; a second backend over the same untaken weights reads them again', async () => {
    const m = await loadModelFor(TINY, 'cpu');
    assert.ok(m.weights.layers[0]!.experts[5]!.stored);
    const a = createCpuBackend(m.spec, m.weights, { threads: 1 });
    const b = createCpuBackend(m.spec, m.weights, { threads: 1 });
    try {
      assert.equal(a.banks.digest(), b.banks.digest());
    } finally {
      a.dispose();
      b.dispose();
    }
  });

  for (const bf16 of ['float32', 'stored'] as const) {
    it(`bf16 ${bf16}: an infinity in a streamed expert is refused as its row is written, naming the tensor`, async () => {
      const tensor = 'model.layers.2.mlp.experts.9.up_proj.weight';
      const dir = corruptCopy(TINY, tensor, 10, [0x80, 0x7f]); // element 5 is +Inf
      try {
        const m = await loadModel(dir, { raw: false, bf16, streamExperts: true });
        assert.throws(() => createCpuBackend(m.spec, m.weights, { threads: 1 }), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_CHECKPOINT'
          && e.message.includes(`tensor "${tensor}": element 5 of`) && /is Infinity/.test(e.message));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
