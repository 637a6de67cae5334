// The CUDA banks' background moves on the fake driver: each exchange is two row copies on the copy stream,
// landing at step boundaries (never before their copies report done), paced by spare rows and copiesInFlight;
// the logical map changes only on landing; conflicting requests and instant swaps mid-flight are refused.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectedTensors } from '../../../model/architecture.ts';
import type { RawTensor } from '../../../model/weights.ts';
import { syntheticModel } from '../../cpu/synthetic.ts';
import { mapTensorSource } from '../../../model/tensor-source.ts';
import { CudaBackend } from '../cuda-backend.ts';
import { FakeCudaDriver } from '../driver/fake-driver.ts';
import { KERNEL_GROUPS } from '../driver/kernels.ts';

const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-banks-'));
for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
after(() => rmSync(kernelDir, { recursive: true, force: true }));
const { spec } = syntheticModel({ hiddenSize: 64, headDim: 32, numHeads: 2, numKvHeads: 1, expertIntermediate: 32, numExperts: 8, topK: 2 });
const raw = new Map<string, RawTensor>();
for (const [name, shape] of expectedTensors(spec)) raw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(shape.reduce((a, b) => a * b, 1) * 2) });

function banksOn(opts: { copiesInFlight?: number } = { copiesInFlight: 2 }) {
  const d = new FakeCudaDriver();
  const be = new CudaBackend(d, spec, mapTensorSource(raw), { kernelDir, placement: { hotPerLayer: 5 }, ...opts });
  return { d, be, banks: be.banks, opts };
}

test('an exchange lands after both its copies report done, at a step boundary; the map changes only then', () => {
  const { d, be, banks } = banksOn();
  assert.equal(banks.hotRowsAllocated, 5 + banks.spareRows);
  const [a, b] = [banks.expertAt(0, 'hot', 1), banks.expertAt(0, 'cold', 2)];
  d.eventsComplete = false;
  banks.requestSwap(0, 1, 2);
  assert.equal(d.copies.length, 1, 'phase 1: the cold row is copied into a spare row');
  assert.equal(d.copies[0]!.src, banks.coldDev[0]! + BigInt(2 * banks.rowBytes));
  assert.equal(d.copies[0]!.dst, banks.hotDev[0]! + BigInt(5 * banks.rowBytes), 'the first spare row');
  assert.deepEqual(banks.takeLanded(), [], 'copy still running: nothing lands');
  assert.throws(() => banks.requestSwap(0, 1, 0), /already moving/);
  assert.throws(() => banks.swapRows(0, 0, 0), /in flight/);
  d.eventsComplete = true;
  assert.deepEqual(banks.takeLanded(), [], 'phase 1 done: the table points the entering expert at its new row, phase 2 queued');
  assert.equal(d.copies.length, 2);
  assert.equal(d.copies[1]!.dst, banks.coldDev[0]! + BigInt(2 * banks.rowBytes), 'phase 2 writes the freed cold row');
  assert.equal(d.copies[1]!.src, banks.hotDev[0]! + BigInt(1 * banks.rowBytes), 'from the leaving expert\'s hot row');
  assert.equal(banks.expertAt(0, 'hot', 1), a, 'logically still where it was');
  assert.deepEqual(banks.takeLanded(), [{ layer: 0, hotRow: 1, coldRow: 2 }]);
  assert.equal(banks.expertAt(0, 'hot', 1), b);
  assert.equal(banks.expertAt(0, 'cold', 2), a);
  assert.equal(banks.moving, 0);
  // The next move lands in the row the last one freed or the other spare: never in a row a slot points at.
  banks.requestSwap(0, 0, 0);
  const dst = d.copies[2]!.dst;
  assert.ok([1, 6].map((r) => banks.hotDev[0]! + BigInt(r * banks.rowBytes)).includes(dst), 'a free row');
  while (banks.moving > 0) banks.takeLanded();
  be.dispose();
});

test('moves are paced: at most copiesInFlight copies queued, at most spareRows exchanges of a layer in flight', () => {
  const { d, be, banks } = banksOn();
  d.eventsComplete = false;
  assert.equal(banks.startable, 2, 'two copy slots free');
  banks.requestSwap(0, 0, 0);
  assert.equal(banks.startable, 1);
  banks.requestSwap(0, 1, 1);
  banks.requestSwap(1, 0, 0);
  assert.equal(d.copies.length, 2, 'two copies queued (copiesInFlight 2); the third request waits');
  assert.equal(banks.startable, 0, 'no slot free, and one exchange already waits for one');
  d.eventsComplete = true;
  banks.takeLanded();
  assert.equal(banks.moving, 3);
  let landed = 0;
  for (let i = 0; i < 10 && banks.moving > 0; i++) landed += banks.takeLanded().length;
  assert.equal(landed, 3);
  // Three exchanges of one layer with two spare rows: the third starts only once a spare row is free.
  d.eventsComplete = false;
  const before = d.copies.length;
  banks.requestSwap(0, 2, 2);
  banks.requestSwap(0, 3, 0);
  banks.requestSwap(0, 4, 1);
  assert.equal(d.copies.length - before, 2);
  d.eventsComplete = true;
  for (let i = 0; i < 10 && banks.moving > 0; i++) banks.takeLanded();
  assert.equal(banks.moving, 0);
  be.dispose();
});
