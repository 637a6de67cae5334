// startServing loads only what its backend computes with: on the cpu backend, float32 weights and no raw
// tensors (the shard bytes would otherwise stay alive beside them for the life of the server).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { startServing } from './boot.ts';

const MODEL_DIR = join(process.cwd(), 'models', 'tiny-moe');

test('serve on the cpu backend keeps the float32 weights and no raw tensors', async () => {
  const s = await startServing({ modelDir: MODEL_DIR, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: () => {} });
  try {
    assert.equal(s.model.raw.size, 0, 'no raw tensors held');
    assert.ok(s.model.weights.embed instanceof Float32Array, 'tiny-moe keeps the embedding float32');
    assert.equal(s.model.weights.embed.length, 8192 * 128);
    const res = await fetch(`${s.server.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'hello', max_tokens: 3, ignore_eos: true, temperature: 0 }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as { usage: { completion_tokens: number } };
    assert.equal(body.usage.completion_tokens, 3);
  } finally {
    await s.close();
  }
});
