import { it } from 'node:test';
import assert from 'node:assert/strict';
import { checkStepChunks } from './step-chunks.ts';
import type { KvPool } from '../../backend.ts';

it('checkStepChunks: counts tokens; refuses empty steps, repeated sequences, positions past --max-model-len, tables short of the positions or naming blocks outside the pool, bad tokens', () => {
  const pool: KvPool = { blockSize: 4, numBlocks: 6, dtype: 'bfloat16', bytesPerBlock: 64 };
  const check = (chunks: Parameters<typeof checkStepChunks>[0]): number => checkStepChunks(chunks, pool, 2, 10);
  assert.equal(check([{ seq: 0, tokens: [1, 2], startPos: 0, blockTable: [3] }, { seq: 1, tokens: [3], startPos: 7, blockTable: [5, 0] }]), 3);
  const bad: [Parameters<typeof checkStepChunks>[0], RegExp][] = [
    [[], /at least one chunk/],
    [[{ seq: 0, tokens: [1], startPos: 0, blockTable: [0] }, { seq: 0, tokens: [1], startPos: 1, blockTable: [0] }], /appears twice/],
    [[{ seq: 0, tokens: [], startPos: 0, blockTable: [0] }], /has no tokens/],
    [[{ seq: 0, tokens: [1, 2], startPos: 7, blockTable: [0, 1, 2] }], /positions 7..8 are outside 0..7 \(--max-model-len\)/],
    [[{ seq: 0, tokens: [1, 2], startPos: 3 }], /need a blockTable of 2 blocks of 4 positions \(got none\)/],
    [[{ seq: 0, tokens: [1, 2], startPos: 3, blockTable: [1] }], /need a blockTable of 2 blocks of 4 positions \(got 1\)/],
    [[{ seq: 0, tokens: [1], startPos: 4, blockTable: [1, 6] }], /blockTable\[1\] = 6 is not a block of the pool \[0, 6\)/],
    [[{ seq: 0, tokens: [10], startPos: 0, blockTable: [0] }], /token 10 of seq 0 is not in \[0, 10\)/],
  ];
  for (const [chunks, re] of bad) assert.throws(() => check(chunks), re);
});
