// Streamed experts beyond qwen3_moe's float ones (loadModel's streamExperts, what the CLI and server load): the
// family fixtures (mixtral, olmoe, deepseek_v3 with its dense layer) and block-FP8 experts read from the shards
// straight into the banks give the bytes of banks filled from loaded experts: every step's logits and routing
// through random swaps, counter, digest; one and two threads, SIMD on and off, one piece a bank and one row a
// piece. A corrupt streamed FP8 byte or scale is refused as its row is written, naming the tensor; gpt-oss's
// stacked MXFP4 experts still load (not streamed).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { createCpuBackend } from './cpu-backend.ts';
import { TAKEN_EXPERT } from './banks.ts';
import { assertSameRecord, corruptCopy, randomMap, recordRun } from './test-helpers.ts';
import { loadModel } from '../../model/load.ts';
import { loadModelFor } from '../load-for.ts';
import { moeLayerIds } from '../../model/spec.ts';
import { ResidencyError } from '../../errors.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

const sched = { swapsPerStep: 3, seed: 5, token: (f: number, i: number, s: number) => f * 7 + i * 13 + s, counted: (i: number) => i % 3 !== 1 };
const batches = [[[1, 5, 9, 2]], [[3, 4], [7, 8, 10, 11, 12], [6]]];

describe('streamed experts of the families and block FP8', () => {
  for (const [name, hot] of [['mixtral-tiny', 5], ['olmoe-tiny', 20], ['deepseek-v3-tiny', 13], ['qwen3-moe-fp8-tiny', 5]] as const) {
    for (const [threads, simd] of [[1, false], [1, true], [2, false], [2, true]] as const) {
      it(`${name}, ${threads} thread(s), SIMD ${simd ? 'on' : 'off'}: the same bytes as banks filled from loaded experts`, async () => {
        const dir = familyCheckpoint(name);
        const loaded = await loadModel(dir, { raw: false });
        const streamed = await loadModel(dir, { raw: false, streamExperts: true });
        const ids = moeLayerIds(streamed.spec);
        for (const l of ids) assert.ok(streamed.weights.layers[l]!.experts.every((e) => e.stored && (e.gate as Float32Array).length === 0), `layer ${l}: no expert read at load`);
        assert.ok(loaded.weights.layers[ids[0]!]!.experts.every((e) => !e.stored), 'loaded without streamExperts');
        const placement = randomMap(loaded.spec, hot, 11);
        const a = createCpuBackend(loaded.spec, loaded.weights, { placement, threads, simd });
        const b = createCpuBackend(streamed.spec, streamed.weights, { placement, threads, simd, takeExperts: true, bankPieceWords: threads === 2 ? 1 : undefined });
        try {
          assert.equal(b.banks.rowSize, a.banks.rowSize, 'row format');
          assert.deepEqual(b.banks.quant, a.banks.quant, 'row layout');
          assert.equal(b.banks.digest(), a.banks.digest(), 'boot digest');
          await Promise.all([a.ready(), b.ready()]);
          const want = recordRun(a, batches, 6, sched);
          assertSameRecord(recordRun(b, batches, 6, sched), want);
          for (const l of ids) assert.ok(streamed.weights.layers[l]!.experts.every((e) => e === TAKEN_EXPERT), `layer ${l} taken`);
        } finally {
          a.dispose();
          b.dispose();
        }
      });
    }
  }

  it('the CPU load streams the families\' and FP8 experts; gpt-oss\'s stacked MXFP4 experts are loaded', async () => {
    for (const name of ['mixtral-tiny', 'olmoe-tiny', 'deepseek-v3-tiny', 'qwen3-moe-fp8-tiny', 'gpt-oss-tiny-mxfp4'] as const) {
      const m = await loadModelFor(familyCheckpoint(name), 'cpu');
      const e = m.weights.layers[moeLayerIds(m.spec)[0]!]!.experts[1]!;
      assert.equal(e.stored !== undefined, name !== 'gpt-oss-tiny-mxfp4', name);
      const b = createCpuBackend(m.spec, m.weights, { threads: 1 });
      b.dispose();
      m.tensors.close();
    }
  });

  const FP8 = familyCheckpoint('qwen3-moe-fp8-tiny');
  const tensor = 'model.layers.1.mlp.experts.3.up_proj.weight';
  for (const [what, name, at, bytes, message] of [
    ['a NaN byte', tensor, 7, [0x7f], new RegExp(`tensor "${tensor.replaceAll('.', '\\.')}": element 7 of 256x256 is NaN`)],
    ['an infinite scale', `${tensor}_scale_inv`, 4, [0, 0, 0x80, 0x7f], /_scale_inv": element 1 of 2x2 is Infinity/],
    ['a negative scale', `${tensor}_scale_inv`, 8, [0, 0, 0x80, 0xbf], /_scale_inv": the scale of block \[1, 0\] is -1/],
  ] as const) {
    it(`block FP8: ${what} in a streamed expert is refused as its row is written, naming the tensor`, async () => {
      const dir = corruptCopy(FP8, name, at, [...bytes]);
      try {
        const m = await loadModel(dir, { raw: false, streamExperts: true });
        assert.throws(() => createCpuBackend(m.spec, m.weights, { threads: 1 }), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_CHECKPOINT' && message.test(e.message));
        // Loaded, the same bytes give the same refusal.
        await assert.rejects(loadModel(dir, { raw: false }), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_CHECKPOINT' && message.test(e.message));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
