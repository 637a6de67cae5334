import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadTokenizer } from './tokenizer.ts';
import { SHIPPED_MODEL, rejectsWith } from './test-helpers.ts';
import { tinyMoeFile } from '../../fixtures/fixture-paths.ts';

interface ParityCase { domain: string; prompt: string; prompt_ids: number[] }

describe('tokenizer (tiny-moe)', async () => {
  const tok = await loadTokenizer(SHIPPED_MODEL);
  const parity = JSON.parse(await readFile(tinyMoeFile('parity.json'), 'utf8')) as { cases: ParityCase[] };

  it('knows its vocabulary size and eos from tokenizer_config.json', () => {
    assert.equal(tok.vocabSize, 8192);
    assert.deepEqual(tok.eosTokenIds, [0]);
  });

  it('round-trips text in every script the model was trained on', () => {
    for (const s of ['hello world', 'The quick brown fox.\n\tindent', 'Grüße aus Köln', 'ファイルを開く', '打开文件', 'Привет', 'const x = () => 42;', '', '  two  spaces ', '🙂 emoji']) {
      assert.equal(tok.decode(tok.encode(s)), s, JSON.stringify(s));
    }
  });

  it('treats <|endoftext|> as the special token 0 and can skip it when decoding', () => {
    const ids = tok.encode('a<|endoftext|>b');
    assert.ok(ids.includes(0));
    assert.equal(tok.decode(ids), 'a<|endoftext|>b');
    assert.equal(tok.decode(ids, { skipSpecial: true }), 'ab');
  });

  it('decodes an empty list and unknown ids to nothing; refuses negative or fractional ids', async () => {
    assert.equal(tok.decode([]), '');
    assert.equal(tok.decode([8192, 99999]), '');
    await rejectsWith(() => tok.decode([1, -1]), 'BAD_ARGUMENT', /token id -1 at position 1/);
    await rejectsWith(() => tok.decode([1.5]), 'BAD_ARGUMENT', /token id 1\.5 at position 0/);
  });

  it('encode(prompt) equals prompt_ids for every parity.json case', () => {
    assert.equal(parity.cases.length, 21);
    for (const c of parity.cases) {
      assert.deepEqual(tok.encode(c.prompt), c.prompt_ids, `${c.domain}: ${JSON.stringify(c.prompt.slice(0, 40))}`);
      assert.equal(tok.decode(c.prompt_ids), c.prompt, c.domain);
    }
  });
});
