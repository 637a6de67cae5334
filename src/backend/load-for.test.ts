// What each backend loads (load-for.ts): the CPU backend float32 weights with its experts left in the shards, the
// CUDA backend nothing read at load.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadModel } from '../model/load.ts';
import { matrixSize } from '../model/quant.ts';
import { SHIPPED_MODEL, weightArrays } from '../model/test-helpers.ts';
import { loadModelFor, loadOptionsFor } from './load-for.ts';

describe('loading only what the backend computes with', () => {
  it('the cpu backend gets float32 weights and no raw tensors; the routed experts stay in the shards for its banks', async () => {
    assert.deepEqual(loadOptionsFor('cpu'), { weights: true, raw: false, stream: false, bf16: 'auto', streamExperts: true });
    const m = await loadModelFor(SHIPPED_MODEL, 'cpu', { name: 'tiny' });
    assert.equal(m.spec.name, 'tiny');
    assert.equal(m.raw.size, 0);
    assert.equal(matrixSize(m.weights.embed), 8192 * 128);
    const e = m.weights.layers[3]!.experts[17]!;
    assert.equal((e.up as Float32Array).length, 0, 'not read at load');
    assert.deepEqual([e.stored?.up, e.stored?.keepBf16], ['model.layers.3.mlp.experts.17.up_proj.weight', false]);
    assert.equal(e.stored!.source, m.tensors, 'read from the model\'s tensors');
    m.tensors.close();
  });

  it('the cuda backend streams the stored tensors: nothing read or converted at load', async () => {
    assert.deepEqual(loadOptionsFor('cuda'), { weights: false, raw: false, stream: true });
    const steps: string[] = [];
    const m = await loadModelFor(SHIPPED_MODEL, 'cuda', { onProgress: (_d, _t, what) => steps.push(what) });
    assert.equal(m.raw.size, 0);
    assert.equal(steps.length, 0, 'no shard was read');
    assert.ok(weightArrays(m.weights).every((a) => a.length === 0), 'every float32 array is empty');
    const e = m.tensors.info('model.embed_tokens.weight');
    assert.equal(e.dtype, 'BF16');
    assert.deepEqual(e.shape, [8192, 128]);
    // A positioned read gives the same bytes as the whole-checkpoint reader.
    const full = await loadModel(SHIPPED_MODEL, { weights: false, raw: true });
    const want = full.raw.get('model.layers.3.mlp.experts.7.down_proj.weight')!.bytes;
    const got = new Uint8Array(64);
    m.tensors.read('model.layers.3.mlp.experts.7.down_proj.weight', got, 256);
    assert.deepEqual(got, want.subarray(256, 320));
    assert.equal([...m.tensors.names()].length, 1208);
    assert.throws(() => m.tensors.info('nope'), /tensor nope is missing/);
    m.tensors.close();
  });
});
