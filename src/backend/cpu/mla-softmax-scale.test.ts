// The CPU backend's multi-head latent attention takes its softmax scale from the spec (MlaSpec.softmaxScale, DeepSeek's
// (nope + rope)^-0.5 times YaRN's mscale_all_dim correction squared): doubling it gives, bit for bit, the run of the same
// model with every q_b_proj weight doubled (q, its rotated part and every score exactly twice as large), and not the
// unchanged model's run.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { loadModel } from '../../model/load.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { ModelWeights } from '../../model/weights.ts';
import { recordFresh } from './test-helpers.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

const sched = { swapsPerStep: 0, seed: 3, token: (f: number, i: number, s: number) => f * 5 + i * 11 + s, counted: () => true };
const batches = [[[3, 17, 40, 2, 9, 31]], [[5, 6], [70, 8, 12]]];

it('MLA: the softmax scale is MlaSpec.softmaxScale (twice it = q_b_proj twice, bit for bit)', async () => {
  const { spec, weights } = await loadModel(familyCheckpoint('deepseek-v3-tiny'), { raw: false });
  const sharper: ModelSpec = { ...spec, mla: { ...spec.mla!, softmaxScale: 2 * spec.mla!.softmaxScale } };
  const doubledQ: ModelWeights = {
    ...weights,
    layers: weights.layers.map((ly) => {
      const qB = ly.mla!.qB;
      assert.ok(qB instanceof Float32Array, 'float32 q_b_proj (the fixture loaded as float)');
      return { ...ly, mla: { ...ly.mla!, qB: qB.map((v) => 2 * v) } };
    }),
  };
  const opts = { threads: 1 };
  const a = await recordFresh(sharper, weights, opts, batches, 6, sched);
  const b = await recordFresh(spec, doubledQ, opts, batches, 6, sched);
  const plain = await recordFresh(spec, weights, opts, batches, 6, sched);
  a.steps.forEach((s, i) => assert.ok(s.equals(b.steps[i]!), `step ${i}: the scale doubled = q doubled`));
  assert.ok(a.steps.some((s, i) => !s.equals(plain.steps[i]!)), 'the scale changes the run');
});
