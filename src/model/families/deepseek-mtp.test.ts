// DeepSeek-V3 / R1 checkpoints store num_nextn_predict_layers multi-token-prediction layers after the last layer
// (model.layers.61.* on the hub): they are not read, as transformers does not read them. deepseek-v3-tiny with one such
// layer added in a shard of its own gives the weights of the fixture without it.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModel } from '../load.ts';
import { float32ToBF16Bytes, writeSafetensors } from '../safetensors-writer.ts';
import { withTempDir } from '../test-helpers.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

it('deepseek_v3: an MTP layer (num_nextn_predict_layers 1, its tensors after the last layer) is left unread; the weights are the fixture\'s', async () => {
  const DIR = familyCheckpoint('deepseek-v3-tiny');
  await withTempDir(async (dir) => {
    for (const f of readdirSync(DIR)) if (f !== 'config.json' && f !== 'model.safetensors.index.json') symlinkSync(join(DIR, f), join(dir, f));
    const config = JSON.parse(readFileSync(join(DIR, 'config.json'), 'utf8')) as { num_hidden_layers: number; hidden_size: number };
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, num_nextn_predict_layers: 1 }));
    const L = config.num_hidden_layers, H = config.hidden_size;
    // What DeepSeek's MTP layer adds beside a decoder layer's tensors (NaN: a read of it would be refused at load).
    const mtp = ['enorm.weight', 'hnorm.weight', 'shared_head.norm.weight', 'eh_proj.weight'].map((n) => {
      const shape = n === 'eh_proj.weight' ? [H, 2 * H] : [H];
      return { name: `model.layers.${L}.${n}`, dtype: 'BF16' as const, shape, bytes: float32ToBF16Bytes(new Float32Array(shape.reduce((a, b) => a * b)).fill(NaN)) };
    });
    await writeSafetensors(join(dir, 'model-mtp.safetensors'), mtp);
    const index = JSON.parse(readFileSync(join(DIR, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    for (const t of mtp) index.weight_map[t.name] = 'model-mtp.safetensors';
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
    const withMtp = await loadModel(dir, { raw: false });
    const plain = await loadModel(DIR, { raw: false });
    assert.equal(withMtp.spec.numLayers, L);
    assert.deepEqual(withMtp.weights, plain.weights);
  });
});
