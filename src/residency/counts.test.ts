import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Counter, countDelta, parseCountsDump } from './counts.ts';

test('countDelta subtracts unsigned, so a wrap between snapshots is harmless', () => {
  const prev = Uint32Array.of(4294967290, 5);
  const next = Uint32Array.of(3, 9);
  assert.deepEqual([...countDelta(prev, next)], [9, 4]);
});

test('Counter counts one per pick and skips steps over count_tmax', () => {
  const c = new Counter(2, 4, 2);
  // 2 tokens x 2 layers x top-2
  assert.equal(c.addPicks([0, 1, 2, 3, 0, 2, 1, 3], 2, 256), true);
  assert.deepEqual([...c.snapshot()], [2, 1, 1, 0, 0, 1, 1, 2]);
  assert.equal(c.addPicks([0, 1, 2, 3, 0, 2, 1, 3], 2, 1), false);
  assert.deepEqual([...c.snapshot()], [2, 1, 1, 0, 0, 1, 1, 2]);
  c.table[0] = 0xffffffff;
  c.addPicks([0, 1, 2, 3], 1);
  assert.equal(c.table[0], 0, 'wraps at 2^32 like the device counter');
});

test('counts dump validation names the field', () => {
  const ok = { version: 1, model: 'm', step: 3, decode_steps: 3, half_life: 500, decayed: [[1, 2]], cumulative: [[1, 2]] };
  assert.equal(parseCountsDump(ok).step, 3);
  assert.throws(() => parseCountsDump({ ...ok, decayed: [[1]] }), /decayed\[0\]: 1 experts, expected 2/);
  assert.throws(() => parseCountsDump({ ...ok, cumulative: [[1, -2]] }), /cumulative\[0\]\[1\]/);
  assert.throws(() => parseCountsDump({ ...ok, step: 'x' }), /step:/);
});
