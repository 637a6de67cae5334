import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fitMapCommand } from './fit-map.ts';
import { saveCountsDump } from '../residency/files.ts';
import { parseRowMap } from '../residency/rowmap.ts';

test('fit-map writes a valid top-H map and rejects bad arguments by name', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fit-map-'));
  const rows = [[5, 0, 9, 1], [0, 0, 0, 7]];
  saveCountsDump(join(dir, 'dump.json'), { version: 1, model: 'm', step: 1, decode_steps: 1, half_life: 500, decayed: rows, cumulative: rows });
  const log = console.log;
  console.log = () => {};
  try {
    assert.equal(await fitMapCommand.run(['--counts', join(dir, 'dump.json'), '--hot', '2', '--out', join(dir, 'map.json')]), 0);
  } finally {
    console.log = log;
  }
  const map = parseRowMap(JSON.parse(readFileSync(join(dir, 'map.json'), 'utf8')));
  assert.deepEqual(map.layers_map, [{ hot: [0, 2], cold: [1, 3] }, { hot: [0, 3], cold: [2, 1] }]);
  await assert.rejects(fitMapCommand.run(['--counts', join(dir, 'dump.json'), '--hot', '2']), /--out is required/);
  await assert.rejects(fitMapCommand.run(['--counts', join(dir, 'dump.json'), '--hot', 'x', '--out', 'y']), /--hot must be an integer/);
  await assert.rejects(fitMapCommand.run(['--counts', join(dir, 'nope.json'), '--hot', '2', '--out', 'y']), /cannot read counts dump/);
});
