// Finite but huge weights (3.39e38 in the final norm: a valid bf16 value, so the load's weight check passes)
// give non-finite logits (issue 46 item 7). A greedy request fails as a sampled one does, with a clear error,
// instead of a 200 with empty text and finish_reason "stop"; streamed or not, argmax on the host or not.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { startServing, type Serving } from '../../src/server/boot.ts';
import { post, readSse } from './helpers.ts';

let s: Serving;
before(async () => {
  const model = await loadModelFor(resolve(process.cwd(), 'models/tiny-moe'), 'cpu');
  (model.weights.finalNorm as Float32Array).fill(3.39e38);
  s = await startServing({ modelDir: model.dir, model, backend: 'cpu', hot: 49, port: 0, host: '127.0.0.1', log: () => {} });
});
after(async () => { await s.close(); });

for (const [name, fields] of [
  ['greedy (argmax only)', { temperature: 0 }],
  ['greedy with logprobs (the sampler\'s argmax)', { temperature: 0, logprobs: 2 }],
  ['greedy with a penalty', { temperature: 0, repetition_penalty: 1.2 }],
  ['sampled', { temperature: 0.8, seed: 1 }],
] as const) {
  test(`${name}: a 500 naming non-finite logits, not an empty "stop"`, async () => {
    const r = await post(`${s.server.url}/v1/completions`, { prompt: 'The ls command', max_tokens: 4, ...fields });
    const body = await r.json();
    assert.equal(r.status, 500, JSON.stringify(body));
    assert.match(body.error.message, /non-finite logits/);
    const streamed = await readSse(await post(`${s.server.url}/v1/completions`, { prompt: 'The ls command', max_tokens: 4, stream: true, ...fields }));
    const last = streamed.chunks.at(-1);
    assert.match(JSON.stringify(last), /non-finite logits/, `the stream ends with the error: ${JSON.stringify(last)}`);
  });
}
