// The block manager: blocks taken as a sequence grows and given back, prefix hits chained by hash, the last token
// always computed (copy-on-write of a block-aligned prompt's last block), eviction order, refusals leave nothing taken.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KvBlocks, KvSequence } from './kv-blocks.ts';

const range = (n: number, from = 0): number[] => Array.from({ length: n }, (_, i) => from + i);

test('a sequence takes blocks as it grows and gives every one back; a refusal takes nothing', () => {
  const kv = new KvBlocks(4, 4, false);
  const s = new KvSequence();
  assert.deepEqual(kv.admit(s, range(6), 6), { cachedTokens: 0, copies: [] });
  assert.equal(s.blocks.length, 2, '6 positions: 2 blocks of 4');
  assert.ok(kv.grow(s, 8));
  assert.equal(s.blocks.length, 2, 'position 7 is in block 1 still');
  assert.ok(kv.grow(s, 9));
  assert.equal(s.blocks.length, 3);
  assert.ok(!kv.grow(s, 17), '5 blocks: one more than the pool');
  assert.equal(s.blocks.length, 3, 'nothing taken');
  const t = new KvSequence();
  assert.equal(kv.admit(t, range(8), 8), null, 'two blocks wanted, one free');
  assert.equal(t.blocks.length, 0);
  kv.release(s);
  assert.equal(kv.freeBlocks, 4);
  assert.equal(kv.usage, 0);
});

test('prefix hits: full blocks only, chained (same tokens after a different prefix miss), counted in tokens', () => {
  const kv = new KvBlocks(16, 4, true);
  const a = new KvSequence();
  const prompt = range(10, 100);
  kv.admit(a, prompt, 10);
  kv.commit(a, prompt, 10);
  assert.equal(a.cached, 2, 'two full blocks computed');
  const b = new KvSequence();
  const other = [...range(9, 100), 7, 8, 9];
  assert.deepEqual(kv.admit(b, other, 12), { cachedTokens: 8, copies: [] }, 'the first two blocks hit');
  assert.deepEqual(b.blocks.slice(0, 2), a.blocks.slice(0, 2), 'shared');
  assert.equal(kv.refsOf(a.blocks[0]!), 2);
  const c = new KvSequence();
  // Block 1's tokens (104..107) after a different block 0: not the same prefix.
  assert.deepEqual(kv.admit(c, [1, 2, 3, 4, 104, 105, 106, 107, 0], 9), { cachedTokens: 0, copies: [] });
  const s = kv.stats();
  assert.equal(s.prefixQueries, 10 + 12 + 9);
  assert.equal(s.prefixHits, 8);
});

test('a prompt cached to its end: the last token is computed, into a copy of the shared last block', () => {
  const kv = new KvBlocks(16, 4, true);
  const a = new KvSequence();
  const prompt = range(8, 50);
  kv.admit(a, prompt, 8);
  kv.commit(a, prompt, 8);
  const b = new KvSequence();
  const got = kv.admit(b, prompt, 8)!;
  assert.equal(got.cachedTokens, 7, 'all but the last token');
  assert.equal(b.blocks[0], a.blocks[0], 'block 0 shared');
  assert.notEqual(b.blocks[1], a.blocks[1], 'block 1 is its own');
  assert.deepEqual(got.copies, [[a.blocks[1], b.blocks[1]]], 'a copy of the cached block');
  assert.equal(kv.refsOf(a.blocks[1]!), 1, 'the source is held by a alone again');
  // Not block-aligned: the partial last block is computed anyway, no copy.
  const c = new KvSequence();
  assert.deepEqual(kv.admit(c, [...prompt, 1], 9), { cachedTokens: 8, copies: [] });
});

test('freed cached blocks stay reusable; evicted least recently freed first, a sequence\'s tail before its head', () => {
  const kv = new KvBlocks(4, 2, true);
  const p = range(4, 10);
  const q = range(4, 20);
  const a = new KvSequence();
  kv.admit(a, p, 4);
  kv.commit(a, p, 4);
  const aBlocks = [...a.blocks];
  kv.release(a);
  assert.equal(a.blocks.length, 0);
  assert.equal(kv.freeBlocks, 4);
  assert.equal(kv.stats().cachedFreeBlocks, 2);
  const b = new KvSequence();
  kv.admit(b, q, 4); // takes the two uncached blocks first
  kv.commit(b, q, 4);
  kv.release(b);
  assert.equal(kv.stats().cachedFreeBlocks, 4);
  // A new prompt of one block evicts a's tail (freed first, last block first), keeping a's head.
  const c = new KvSequence();
  kv.admit(c, [1, 2], 2);
  assert.equal(c.blocks[0], aBlocks[1], 'a\'s tail goes first');
  kv.release(c);
  const d = new KvSequence();
  assert.equal(kv.admit(d, [...p.slice(0, 2), 5, 5], 4)!.cachedTokens, 2, 'a\'s first block still hits');
});

test('a hit on a free cached block uses free room: refused, nothing taken, when the rest does not fit', () => {
  const kv = new KvBlocks(3, 2, true);
  const a = new KvSequence();
  const p = range(4, 1);
  kv.admit(a, p, 4);
  kv.commit(a, p, 4);
  kv.release(a);
  const b = new KvSequence();
  // 2 hit blocks (free, cached) + 2 new = 4 > 3 free.
  assert.equal(kv.admit(b, [...p, 9, 9, 9, 9], 8), null);
  assert.equal(kv.freeBlocks, 3);
  assert.equal(kv.stats().cachedFreeBlocks, 2, 'still cached');
});
