import { dequantize, matrixSize, type Bf16Matrix } from './quant.ts';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadModel } from './load.ts';
import { readOnGet } from './tensor-source.ts';
import { writeSyntheticCheckpoint } from './synthetic.ts';
import { tensorToFloat32 } from './convert.ts';
import { SHIPPED_MODEL, weightArrays, withTempDir } from './test-helpers.ts';

describe('loadModel on the shipped tiny-moe', async () => {
  const progress: [number, number, string][] = [];
  const m = await loadModel(SHIPPED_MODEL, { onProgress: (d, t, w) => progress.push([d, t, w]) });

  it('parses the spec from config.json', () => {
    assert.deepEqual({ ...m.spec, eosTokenIds: [...m.spec.eosTokenIds] }, {
      architecture: 'qwen3_moe', name: 'tiny-moe', vocabSize: 8192, hiddenSize: 128, numLayers: 6,
      numHeads: 2, numKvHeads: 1, headDim: 64, numExperts: 64, topK: 6, expertIntermediate: 48,
      normTopkProb: true, rmsNormEps: 1e-6, ropeTheta: 10000, tieWordEmbeddings: true,
      maxPositions: 2048, bosTokenId: 0, eosTokenIds: [0],
    });
    assert.ok(Object.isFrozen(m.spec));
  });

  it('holds every tensor with the right size', () => {
    assert.equal(m.raw.size, 1 + 6 * (9 + 64 * 3) + 1); // embed, per layer 9 + 64 experts x 3, final norm
    const w = m.weights;
    assert.ok(w.embed instanceof Float32Array, 'tiny-moe keeps the embedding float32');
    assert.equal(w.embed.length, 8192 * 128);
    assert.equal(w.lmHead, w.embed, 'tied lm_head is the same array as the embedding');
    assert.equal(w.layers.length, 6);
    for (const l of w.layers) {
      assert.equal(matrixSize(l.qProj), 128 * 128);
      assert.equal(matrixSize(l.kProj), 64 * 128);
      assert.equal(matrixSize(l.oProj), 128 * 128);
      assert.equal(l.qNorm.length, 64);
      assert.equal(l.router.length, 64 * 128);
      assert.equal(l.experts.length, 64);
      for (const e of l.experts) {
        assert.equal(matrixSize(e.gate), 48 * 128);
        assert.equal(matrixSize(e.down), 128 * 48);
      }
    }
  });

  it('converts bf16 exactly (values decoded by hand from the shard bytes)', () => {
    // embed[0][0..3] bytes 49 3c 14 3e c2 3c 51 3d: 0x3c49 -> 0x3c490000 = (1 + 73/128) * 2^-7, ...
    assert.deepEqual([...dequantize(m.weights.embed).subarray(0, 4)], [201 / 16384, 37 / 256, 97 / 4096, 209 / 4096]);
    // model.norm.weight: 20 40 27 40 25 40 -> 2.5, 2.609375, 2.578125
    assert.deepEqual([...m.weights.finalNorm.subarray(0, 3)], [2.5, 2.609375, 2.578125]);
    // layers.0 q_norm: 9e 3f 84 3f bd 3f
    assert.deepEqual([...m.weights.layers[0]!.qNorm.subarray(0, 3)], [1.234375, 1.03125, 1.4765625]);
    // layers.5 expert 63 down_proj (second shard): c8 bc e2 3d 80 3c
    assert.deepEqual([...dequantize(m.weights.layers[5]!.experts[63]!.down).subarray(0, 3)], [-0.0244140625, 0.1103515625, 0.015625]);
    // layers.3 router: 4d 3b 09 bd 4c 3a
    assert.deepEqual([...m.weights.layers[3]!.router.subarray(0, 3)], [0.0031280517578125, -0.033447265625, 0.0007781982421875]);
    const raw = m.raw.get('model.layers.5.mlp.experts.63.down_proj.weight')!;
    assert.equal(raw.dtype, 'BF16');
    assert.deepEqual(raw.shape, [128, 48]);
    assert.deepEqual([...raw.bytes.subarray(0, 6)], [0xc8, 0xbc, 0xe2, 0x3d, 0x80, 0x3c]);
  });

  it('reports progress monotonically up to the total', () => {
    assert.ok(progress.length > 2);
    const total = progress[0]![1];
    assert.equal(total, 2 * 16945920); // read + convert, in bytes
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i]![0] >= progress[i - 1]![0]);
    assert.deepEqual(progress.at(-1)!.slice(0, 2), [total, total]);
    assert.ok(progress.some(([, , w]) => w === 'reading model-00002-of-00002.safetensors'));
    assert.ok(progress.some(([, , w]) => w.startsWith('converting model.layers.5.')));
  });

  it('loads the tokenizer with eos from config.json', () => {
    assert.deepEqual(m.tokenizer.eosTokenIds, [0]);
    assert.equal(m.tokenizer.vocabSize, 8192);
  });
});

describe('loadModel options and synthetic checkpoints', () => {
  it('weights:false skips conversion but keeps raw tensors and the structure', async () => {
    const m = await loadModel(SHIPPED_MODEL, { weights: false, name: 'tiny' });
    assert.equal(m.spec.name, 'tiny');
    assert.equal(m.raw.size, 1208);
    assert.equal(matrixSize(m.weights.embed), 0);
    assert.equal(m.weights.layers.length, 6);
    assert.equal(m.weights.layers[0]!.experts.length, 64);
  });

  for (const [dtype, shards] of [['BF16', 1], ['F16', 3], ['F32', 2]] as const) {
    it(`loads a ${dtype} checkpoint in ${shards} shard(s) with the values written`, async () => {
      await withTempDir(async (dir) => {
        const written = await writeSyntheticCheckpoint(dir, { dtype, shards, seed: 7 });
        const m = await loadModel(dir);
        assert.equal(m.spec.name.startsWith('moe-model-test-'), true);
        assert.equal(m.raw.size, written.length);
        for (const t of written) assert.deepEqual(m.raw.get(t.name)!.bytes, t.bytes, t.name);
        const down = written.find((t) => t.name === 'model.layers.1.mlp.experts.3.down_proj.weight')!;
        assert.deepEqual(m.weights.layers[1]!.experts[3]!.down, tensorToFloat32(down));
        assert.equal(m.weights.lmHead, m.weights.embed);
      });
    });
  }

  it('an untied checkpoint gets its own lm_head', async () => {
    await withTempDir(async (dir) => {
      const { syntheticConfig } = await import('./synthetic.ts');
      await writeSyntheticCheckpoint(dir, { config: syntheticConfig({ tie_word_embeddings: false }) });
      const m = await loadModel(dir);
      assert.notEqual(m.weights.lmHead, m.weights.embed);
      assert.equal(matrixSize(m.weights.lmHead), 260 * 8);
    });
  });
});

describe('EOS when config.json names none', () => {
  it("takes tokenizer_config.json's eos_token into the spec, so the engine stops where the server hides EOS", async () => {
    await withTempDir(async (dir) => {
      const { copyFile, readFile, readdir, symlink, writeFile } = await import('node:fs/promises');
      const { join } = await import('node:path');
      for (const f of await readdir(SHIPPED_MODEL)) {
        if (f.endsWith('.safetensors')) await symlink(join(SHIPPED_MODEL, f), join(dir, f));
        else await copyFile(join(SHIPPED_MODEL, f), join(dir, f));
      }
      const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      delete config['eos_token_id'];
      await writeFile(join(dir, 'config.json'), JSON.stringify(config));
      const m = await loadModel(dir, { weights: false });
      assert.deepEqual([...m.tokenizer.eosTokenIds], [0]);
      assert.deepEqual([...m.spec.eosTokenIds], [0], 'the engine stops on the EOS the tokenizer knows');
      assert.ok(Object.isFrozen(m.spec));
    });
  });
});

describe('loading only what the backend computes with', () => {
  it('raw:false keeps no raw tensors and no view of the shard bytes, only the float32 weights', async () => {
    const full = await loadModel(SHIPPED_MODEL);
    const m = await loadModel(SHIPPED_MODEL, { raw: false });
    assert.equal(m.raw.size, 0, 'no raw tensors are held');
    const arrays = weightArrays(m.weights);
    assert.equal(arrays.length, 2 + 6 * (9 + 64 * 3));
    for (const a of arrays) {
      // Each array owns its buffer: none is a view into a shard, so nothing keeps the shards alive.
      assert.equal(a.buffer.byteLength, a.byteLength);
    }
    assert.deepEqual(m.weights.layers[3]!.experts[17]!.up, full.weights.layers[3]!.experts[17]!.up, 'same values as a full load');
    assert.deepEqual(m.weights.embed, full.weights.embed);
  });

  it('raw:false reads and converts one tensor at a time: progress counts each stored byte once', async () => {
    const progress: [number, number, string][] = [];
    await loadModel(SHIPPED_MODEL, { raw: false, onProgress: (d, t, w) => progress.push([d, t, w]) });
    const total = progress[0]![1];
    assert.equal(total, 16945920, 'the data sections once: no separate read pass');
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i]![0] >= progress[i - 1]![0]);
    assert.deepEqual(progress.at(-1)!.slice(0, 2), [total, total]);
    assert.ok(progress.some(([, , w]) => w === 'loading model.layers.5.mlp.experts.63.down_proj.weight'));
  });

  it('raw:false with bf16 kept as stored: a projection is the bytes read for it (no second copy), the same bits', async () => {
    const full = await loadModel(SHIPPED_MODEL, { bf16: 'stored' });
    const m = await loadModel(SHIPPED_MODEL, { raw: false, bf16: 'stored' });
    const q = m.weights.layers[2]!.qProj as Bf16Matrix;
    assert.equal(q.format, 'bf16');
    assert.equal(q.data.buffer.byteLength, q.data.byteLength, 'owns its buffer');
    assert.deepEqual(q.data, (full.weights.layers[2]!.qProj as Bf16Matrix).data);
  });

  it('readOnGet: each get reads the stored bytes into a buffer of their own', async () => {
    const full = await loadModel(SHIPPED_MODEL, { weights: false, raw: true });
    const name = 'model.layers.3.mlp.experts.7.down_proj.weight';
    const map = readOnGet(full.tensors);
    const a = map.get(name)!;
    assert.deepEqual(a.bytes, full.raw.get(name)!.bytes);
    assert.equal(a.bytes.buffer.byteLength, a.bytes.byteLength, 'not a view into a read group');
    assert.notEqual(map.get(name)!.bytes, a.bytes, 'nothing cached');
    assert.equal(map.get('nope'), undefined);
    assert.equal(map.size, full.raw.size);
  });

  it('refuses weights:false with raw:false (nothing would be loaded)', async () => {
    await assert.rejects(loadModel(SHIPPED_MODEL, { weights: false, raw: false }), (e: Error & { code?: string }) => e.code === 'BAD_ARGUMENT' && /weights: false with raw: false/.test(e.message));
  });
});
