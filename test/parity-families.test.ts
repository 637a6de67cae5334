// Parity of the CPU backend with the transformers float32 references of the family fixtures (mixtral,
// olmoe, deepseek-v3, gpt-oss with MXFP4 experts, qwen3-moe with block-FP8 projections and experts, both
// computed from the stored format), and a residency round trip on each: harness in parity-harness.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkReport, configsAgree, liveResidency, roundTrip, runParity } from './parity-harness.ts';
import { familyCheckpoint, familyParity, type Family } from '../fixtures/fixture-paths.ts';

/** Each family (its checkpoint generated from fixtures/<family>/config.json) with a hot share that leaves cold rows in every MoE layer. */
const FAMILIES: { family: Family; hot: number }[] = [
  { family: 'mixtral-tiny', hot: 6 },
  { family: 'olmoe-tiny', hot: 24 },
  { family: 'deepseek-v3-tiny', hot: 24 },
  { family: 'gpt-oss-tiny-mxfp4', hot: 12 },
  { family: 'qwen3-moe-fp8-tiny', hot: 12 },
];
// The 4-bit families (qwen3-moe-gptq-tiny, qwen3-moe-awq-tiny, qwen3-moe-ct-int4-tiny, hot 12) join this list with their
// parity.json, made on the GPU machine by fixtures/make/device-refs.sh.

for (const { family, hot } of FAMILIES) {
  const path = familyCheckpoint(family);
  describe(family, () => {
    it('matches the transformers float32 reference on all 8 cases (24 greedy steps each)', async (t) => {
      const r = await runParity(path, familyParity(family), { hot });
      assert.equal(r.cases, 8);
      checkReport(t, r);
    });
    it('residency round trip: swaps keep the logits, restore gives back the boot digest', async (t) => {
      const { swaps, restoreSwaps } = await roundTrip(path, hot);
      t.diagnostic(`${swaps} random swaps, restored in ${restoreSwaps}`);
    });
    it('live residency: counts over the MoE layers only, swaps while decoding change no logit, restore_map gives back the boot digest', async (t) => {
      const { applied, restored } = await liveResidency(path, hot);
      t.diagnostic(`${applied} swaps applied live, ${restored} to restore`);
    });
    it('bit-identical with two threads and with the SIMD kernels off', async () => {
      await configsAgree(path, hot);
    });
  });
}
