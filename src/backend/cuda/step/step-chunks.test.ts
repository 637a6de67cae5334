import { it } from 'node:test';
import assert from 'node:assert/strict';
import { checkStepChunks } from './step-chunks.ts';

it('checkStepChunks: counts tokens; refuses empty steps, closed or repeated sequences, positions past capacity, bad tokens', () => {
  const cap = (seq: number): number | undefined => (seq < 2 ? 8 : undefined);
  const name = (c: number): string => `its capacity ${c}`;
  assert.equal(checkStepChunks([{ seq: 0, tokens: [1, 2], startPos: 0 }, { seq: 1, tokens: [3], startPos: 7 }], cap, 10, name), 3);
  const bad: [Parameters<typeof checkStepChunks>[0], RegExp][] = [
    [[], /at least one chunk/],
    [[{ seq: 5, tokens: [1], startPos: 0 }], /seq 5 is not open/],
    [[{ seq: 0, tokens: [1], startPos: 0 }, { seq: 0, tokens: [1], startPos: 1 }], /appears twice/],
    [[{ seq: 0, tokens: [], startPos: 0 }], /has no tokens/],
    [[{ seq: 0, tokens: [1, 2], startPos: 7 }], /positions 7..8 exceed its capacity 8/],
    [[{ seq: 0, tokens: [10], startPos: 0 }], /token 10 of seq 0 is not in \[0, 10\)/],
  ];
  for (const [chunks, re] of bad) assert.throws(() => checkStepChunks(chunks, cap, 10, name), re);
});
