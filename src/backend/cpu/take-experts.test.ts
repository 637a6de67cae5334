// takeExperts: the banks as the experts' only owner give the same bytes as banks that copied them (every step's
// logits and routing through random swaps, counter, digest; float32, block-FP8 and bf16-as-stored rows; one and
// two threads), leave the loaded weights without their routed experts, and refuse a second backend over them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCpuBackend } from './cpu-backend.ts';
import { TAKEN_EXPERT } from './banks.ts';
import { syntheticModel } from './synthetic.ts';
import { assertSameRecord, randomMap, recordRun } from './test-helpers.ts';
import { loadModel } from '../../model/load.ts';
import { moeLayerIds, type ModelSpec } from '../../model/spec.ts';
import type { ModelWeights } from '../../model/weights.ts';
import { ResidencyError } from '../../errors.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

const sched = { swapsPerStep: 3, seed: 5, token: (f: number, i: number, s: number) => f * 7 + i * 13 + s, counted: (i: number) => i % 3 !== 1 };
const batches = [[[1, 5, 9, 2]], [[3, 4], [7, 8, 10, 11, 12], [6]]];

function compare(name: string, load: () => Promise<{ spec: ModelSpec; weights: ModelWeights }>, hot: number): void {
  for (const threads of [1, 2]) {
    test(`${name}, ${threads} thread(s): taken experts give the copied banks' bytes, the weights drop them, a second backend is refused`, async () => {
      const ref = await load();
      const own = await load();
      const placement = randomMap(ref.spec, hot, 11);
      const copied = createCpuBackend(ref.spec, ref.weights, { placement, threads });
      const taken = createCpuBackend(own.spec, own.weights, { placement, threads, takeExperts: true });
      try {
        assert.equal(taken.banks.digest(), copied.banks.digest(), 'boot digest');
        await Promise.all([copied.ready(), taken.ready()]);
        const a = recordRun(copied, batches, 6, sched);
        assertSameRecord(recordRun(taken, batches, 6, sched), a);
        for (const l of moeLayerIds(own.spec)) assert.ok(own.weights.layers[l]!.experts.every((e) => e === TAKEN_EXPERT), `layer ${l}'s experts taken`);
        assert.ok(ref.weights.layers[moeLayerIds(ref.spec)[0]!]!.experts.every((e) => e !== TAKEN_EXPERT), 'without takeExperts the weights keep them');
        assert.throws(() => createCpuBackend(own.spec, own.weights), (e: unknown) => e instanceof ResidencyError && /taken by another CPU backend/.test(e.message));
      } finally {
        copied.dispose();
        taken.dispose();
      }
    });
  }
}

compare('synthetic float32', async () => syntheticModel({ seed: 3, numExperts: 16, topK: 4 }), 10);
compare('block FP8 fixture', () => loadModel(familyCheckpoint('qwen3-moe-fp8-tiny'), { raw: false }), 5);
compare('tiny-moe, bf16 kept as stored', () => loadModel(resolve(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url))), { raw: false, bf16: 'stored' }), 40);
