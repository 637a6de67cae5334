// families/common.ts loads first without a cycle through the family registry (it once reached
// architecture.ts -> families/index.ts -> mixtral.ts, which read common's exports before they existed).
import { baseFields, posInt, tensorMap } from './common.ts';
import { test } from 'node:test';
import assert from 'node:assert/strict';

test('common.ts imported first: its exports are defined', () => {
  assert.equal(typeof tensorMap, 'function');
  assert.ok(posInt.safeParse(3).success);
  assert.ok('vocab_size' in baseFields);
});
