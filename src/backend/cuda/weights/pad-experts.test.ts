// Padding a model's experts to the kernels' K slice changes no result: tiny-moe (48 units an expert) padded to 64
// gives the CPU spec's logits and routing bit for bit; the padded bytes are the stored rows then zeros; a tensor not
// stored as expected is passed on for the layout checks to refuse.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModel } from '../../../model/load.ts';
import { moeTensorNames } from '../../../model/architecture.ts';
import { toFloat32Weights } from '../../../model/convert.ts';
import { mapTensorSource, readOnGet } from '../../../model/tensor-source.ts';
import type { RawTensor } from '../../../model/weights.ts';
import { CpuBackend } from '../../cpu/cpu-backend.ts';
import { bySequence } from '../../sequences.ts';
import { padExpertsForKernels, paddedIntermediate } from './pad-experts.ts';

const TINY_MODEL_DIR = new URL('../../../../models/tiny-moe/', import.meta.url).pathname;

test('tiny-moe padded from 48 to 64 units an expert: the padded rows hold the stored values then zeros', async () => {
  const m = await loadModel(TINY_MODEL_DIR);
  assert.equal(m.spec.expertIntermediate, 48);
  assert.equal(paddedIntermediate(m.spec), 64);
  const { spec, source } = padExpertsForKernels(m.spec, mapTensorSource(m.raw));
  assert.equal(spec.expertIntermediate, 64);
  const n = moeTensorNames(m.spec, 2).expert(5);
  const H = m.spec.hiddenSize;
  const gate = new Uint16Array(64 * H), down = new Uint16Array(H * 64);
  source.read(n.gate, new Uint8Array(gate.buffer));
  source.read(n.down, new Uint8Array(down.buffer));
  const storedGate = new Uint16Array(m.raw.get(n.gate)!.bytes.slice().buffer);
  const storedDown = new Uint16Array(m.raw.get(n.down)!.bytes.slice().buffer);
  assert.deepEqual(gate.subarray(0, 48 * H), storedGate);
  assert.ok(gate.subarray(48 * H).every((v) => v === 0));
  for (let r = 0; r < H; r++) {
    assert.deepEqual(down.subarray(64 * r, 64 * r + 48), storedDown.subarray(48 * r, 48 * (r + 1)));
    assert.ok(down.subarray(64 * r + 48, 64 * (r + 1)).every((v) => v === 0));
  }
  // A read at an offset is the same bytes as the whole tensor's.
  const part = new Uint8Array(100);
  source.read(n.down, part, 250);
  assert.deepEqual(part, new Uint8Array(down.buffer).subarray(250, 350));
  assert.deepEqual(source.info(n.gate).shape, [64, H]);
  assert.deepEqual(source.info(n.down).shape, [H, 64]);
  assert.deepEqual(source.info('model.embed_tokens.weight').shape, m.raw.get('model.embed_tokens.weight')!.shape);
});

test('tiny-moe padded to 64 units computes the unpadded model\'s logits and routing exactly (CPU spec)', async () => {
  const m = await loadModel(TINY_MODEL_DIR);
  const padded = padExpertsForKernels(m.spec, mapTensorSource(m.raw));
  const pw = toFloat32Weights(padded.spec, readOnGet(padded.source));
  const a = bySequence(new CpuBackend(m.spec, m.weights));
  const b = bySequence(new CpuBackend(padded.spec, pw));
  try {
    for (const be of [a, b]) be.openSequence(0, 32);
    let chunks = [{ seq: 0, tokens: [1, 200, 3000, 45, 7], startPos: 0 }];
    for (let s = 0; s < 4; s++) {
      const x = a.forward({ chunks, count: true, recordRouting: true });
      const y = b.forward({ chunks, count: true, recordRouting: true });
      assert.deepEqual(y.logits, x.logits, `step ${s}: logits`);
      assert.deepEqual(y.routing, x.routing, `step ${s}: routing`);
      chunks = [{ seq: 0, tokens: [(s * 977) % 8192], startPos: chunks[0]!.startPos + chunks[0]!.tokens.length }];
    }
  } finally {
    a.dispose();
    b.dispose();
  }
});

test('a tensor not stored as [I, H] / [H, I] is passed on unpadded, for the layout checks to refuse', async () => {
  const m = await loadModel(TINY_MODEL_DIR);
  const n = moeTensorNames(m.spec, 0).expert(0);
  const raw = new Map<string, RawTensor>(m.raw);
  raw.set(n.gate, { ...raw.get(n.gate)!, shape: [47, m.spec.hiddenSize] });
  const { source } = padExpertsForKernels(m.spec, mapTensorSource(raw));
  assert.deepEqual(source.info(n.gate).shape, [47, m.spec.hiddenSize]);
  assert.deepEqual(source.info(n.up).shape, [64, m.spec.hiddenSize]);
});
