// TextAssembler: byte-level tokens that split UTF-8 characters, and stop strings that straddle tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TextAssembler } from '../../src/server/detokenize.ts';
import type { ServerTokenizer } from '../../src/server/types.ts';

// One token per byte (id = byte + 1; 0 is EOS): decoding a partial character gives U+FFFD, as BPE does.
const bytes: ServerTokenizer = {
  encode: (t) => [...new TextEncoder().encode(t)].map((b) => b + 1),
  decode: (ids) => new TextDecoder().decode(new Uint8Array(ids.map((i) => i - 1))),
  eosTokenIds: [0],
  vocabSize: 257,
};

function run(text: string, stops: string[]): { chunks: string[]; output: string; stopped: boolean } {
  const a = new TextAssembler(bytes, stops);
  const chunks: string[] = [];
  for (const id of bytes.encode(text)) {
    const d = a.push(id);
    if (d) chunks.push(d);
    if (a.stopped) break;
  }
  const tail = a.finish();
  if (tail) chunks.push(tail);
  return { chunks, output: a.output, stopped: a.stopped };
}

test('split UTF-8 characters are never sent half-made', () => {
  const text = 'héllo ファイル → 🙂 done';
  const { chunks, output } = run(text, []);
  assert.equal(chunks.join(''), text);
  assert.equal(output, text);
  for (const c of chunks) assert.ok(!c.includes('\uFFFD'), JSON.stringify(c));
});

test('a stop string across many tokens ends the text before it; nothing of it leaks', () => {
  const { chunks, stopped } = run('abc ファイル xyz', ['ファイル']);
  assert.ok(stopped);
  assert.equal(chunks.join(''), 'abc ');
  for (const c of chunks) assert.ok(!c.includes('フ'));
});

test('held-back text that turns out not to be a stop is released', () => {
  const { chunks, stopped } = run('abcab', ['abd']);
  assert.equal(stopped, false);
  assert.equal(chunks.join(''), 'abcab');
});

test('the earliest of several stops wins; EOS is not text', () => {
  assert.equal(run('one two three', ['three', 'two']).chunks.join(''), 'one ');
  const a = new TextAssembler(bytes, []);
  assert.equal(a.push(0), '');
  assert.equal(a.finish(), '');
});
