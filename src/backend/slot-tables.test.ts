// The slot tables both backends share: inverse tables stay inverse under any exchange; bad rows are refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SlotTables } from './slot-tables.ts';
import { mulberry32 } from '../util/rng.ts';

test('exchanges keep expert -> slot and slot -> expert inverse, and each expert in exactly one slot', () => {
  const E = 16;
  const H = 11;
  const rows = Array.from({ length: 3 }, () => ({ hot: [...Array(H).keys()], cold: [...Array(E - H).keys()].map((i) => H + i) }));
  const t = new SlotTables(rows, E);
  const rand = mulberry32(7);
  for (let i = 0; i < 2000; i++) {
    const l = Math.floor(rand() * 3);
    const h = Math.floor(rand() * H);
    const c = Math.floor(rand() * (E - H));
    const a = t.expertAt(l, 'hot', h);
    const b = t.expertAt(l, 'cold', c);
    t.checkSwap(l, h, c);
    t.exchange(l, h, c);
    assert.equal(t.expertAt(l, 'hot', h), b);
    assert.equal(t.expertAt(l, 'cold', c), a);
  }
  for (let l = 0; l < 3; l++) {
    const seen = new Set<number>();
    for (let e = 0; e < E; e++) {
      const s = t.slotOf(l, e);
      assert.equal(s < H ? t.expertAt(l, 'hot', s) : t.expertAt(l, 'cold', s - H), e);
      seen.add(s);
    }
    assert.equal(seen.size, E);
  }
});

test('out-of-range layers, experts and rows are refused by name', () => {
  const t = new SlotTables([{ hot: [0, 1], cold: [2] }], 3);
  assert.throws(() => t.slotOf(1, 0), /layer 1 is out of range/);
  assert.throws(() => t.slotOf(0, 3), /expert 3 is out of range/);
  assert.throws(() => t.checkSwap(0, 2, 0), /hot row 2 is out of range/);
  assert.throws(() => t.checkSwap(0, 0, 1), /cold row 1 is out of range/);
  assert.throws(() => t.expertAt(0, 'cold', -1), /cold row -1/);
});
