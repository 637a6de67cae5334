// `generate` loads only what its backend computes with: on the cpu backend, no raw tensors. (The cuda
// path's loader options are asserted in src/model/load.test.ts; running it needs a GPU.)
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { LoadedModel } from '../model/load.ts';
import { runGenerate } from './generate.ts';

test('generate on the cpu backend runs on a model that holds no raw tensors', async () => {
  let seen: LoadedModel | undefined;
  const r = await runGenerate(
    { modelDir: join(process.cwd(), 'models', 'tiny-moe'), promptIds: [1, 2, 3], maxTokens: 3, temperature: 0, topP: 1, ignoreEos: true, json: true, backend: 'cpu' },
    { placement: (m) => { seen = m; return undefined; } },
  );
  assert.equal(r.tokens.length, 3);
  assert.ok(seen, 'the placement hook saw the loaded model');
  assert.equal(seen.raw.size, 0, 'no raw tensors held');
  assert.ok(seen.weights.embed instanceof Float32Array, 'tiny-moe keeps the embedding float32');
  assert.equal(seen.weights.embed.length, 8192 * 128);
});
