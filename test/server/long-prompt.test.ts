// A long prompt neither stalls the other streams (it is tokenized in a worker thread) nor is tokenized at
// all when it has more characters than the context can hold.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { loadTokenizer } from '../../src/model/tokenizer.ts';
import { OffThreadEncoder, PROMPT_CHARS_PER_TOKEN } from '../../src/server/prompt-tokenizer.ts';
import type { ServerTokenizer } from '../../src/server/types.ts';
import { charTokenizer, FakeEngine, fakeModel } from './fakes.ts';
import { post, readSse, startTestServer } from './helpers.ts';

const MODEL_DIR = resolve(process.cwd(), 'models/tiny-moe');

test('a prompt longer than the character bound is refused before tokenizing, text or chat', async () => {
  let encoded = 0;
  const counting: ServerTokenizer = { ...charTokenizer, encode: (t) => { encoded++; return charTokenizer.encode(t); } };
  const s = await startTestServer({ model: { ...fakeModel, tokenizer: counting } });
  try {
    const max = PROMPT_CHARS_PER_TOKEN * fakeModel.maxPositions;
    let r = await post(`${s.url}/v1/completions`, { prompt: 'x'.repeat(max + 1), max_tokens: 1 });
    let j = await r.json();
    assert.equal(r.status, 400);
    assert.equal(j.error.code, 'context_length_exceeded');
    assert.equal(j.error.param, 'prompt');
    assert.match(j.error.message, new RegExp(`${max + 1} characters; at most ${max}`));
    r = await post(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'y'.repeat(max) }, { role: 'user', content: [{ type: 'text', text: 'z' }] }] });
    j = await r.json();
    assert.equal(r.status, 400);
    assert.equal(j.error.param, 'messages');
    assert.equal(encoded, 0, 'nothing was tokenized');
  } finally {
    await s.close();
  }
});

test('the worker encodes exactly as the tokenizer does', async () => {
  const tok = await loadTokenizer(MODEL_DIR);
  const enc = new OffThreadEncoder(MODEL_DIR, tok);
  try {
    for (const text of ['The ls command', 'Die Datei wird ' + 'ü日本語 🙂 '.repeat(300), '  \n\t'.repeat(500)]) {
      assert.deepEqual(await enc.encode(text), tok.encode(text), text.slice(0, 20));
    }
  } finally {
    await enc.close();
  }
});

test('the repro: a ~1 MB prompt does not freeze a running stream (it is tokenized off the main thread)', { timeout: 60_000 }, async () => {
  const tok = await loadTokenizer(MODEL_DIR);
  const enc = new OffThreadEncoder(MODEL_DIR, tok);
  await enc.encode('warm up '.repeat(200)); // the worker's start is not what is measured
  const engine = new FakeEngine({ stepMs: 2 });
  const s = await startTestServer({
    // Decoding as the fake engine's ids mean (one character each), so each token is one chunk.
    engine, model: { name: 'fake-moe', maxPositions: 2048, tokenizer: { ...enc.tokenizer(), decode: charTokenizer.decode, vocabSize: 128 } },
    config: { maxBodyBytes: 2 << 20, maxPromptChars: 2 << 20 },
  });
  try {
    const stream = post(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 2000, stream: true, ignore_eos: true });
    const at: number[] = [];
    const reading = stream.then((r) => readSse(r, (_c, t) => at.push(t)));
    while (at.length < 20) await new Promise((r) => setTimeout(r, 5));
    const t0 = performance.now();
    const big = await post(`${s.url}/v1/completions`, { prompt: 'The ls command lists files. '.repeat(37_000), max_tokens: 1 });
    const tokenizedMs = performance.now() - t0;
    assert.equal(big.status, 400, 'too many tokens for the context, found by tokenizing');
    assert.equal((await big.json()).error.code, 'context_length_exceeded');
    const during = at.filter((t) => t >= t0 && t <= t0 + tokenizedMs);
    let worst = 0;
    for (let i = 1; i < at.length; i++) if (at[i]! > t0) worst = Math.max(worst, at[i]! - at[i - 1]!);
    await reading;
    // Inline, the stream stopped for the whole of the tokenizing; off the main thread it keeps its pace.
    assert.ok(during.length > 10, `${during.length} tokens streamed during ${tokenizedMs.toFixed(0)} ms of tokenizing`);
    // Inline, the worst gap would be the whole tokenizing time; on a loaded 2-core CI machine (another test
    // file's model running beside this one) the scheduler alone can stall a thread for a few hundred ms,
    // so the bound is relative to how long tokenizing took, never below 150 ms.
    assert.ok(worst < Math.max(150, tokenizedMs / 2), `worst inter-token gap ${worst.toFixed(1)} ms while tokenizing took ${tokenizedMs.toFixed(0)} ms`);
  } finally {
    await s.close();
    await enc.close();
  }
});
