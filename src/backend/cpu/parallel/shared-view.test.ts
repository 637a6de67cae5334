// Shared arrays cross to the CPU workers as (buffer, offset, length): Node 20's structured clone keeps a
// typed-array view's byte length in 32 bits, so a bank over 4 GiB (Mixtral-8x7B's 8 experts of a layer in
// float32) arrived cut short and the rest of its rows read as NaN with 2+ threads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import { fromSharedView, toSharedView } from './layout.ts';

test('a shared view keeps its offset and length, past 4 GiB too, on a worker', async (t) => {
  let sab: SharedArrayBuffer;
  try {
    sab = new SharedArrayBuffer(4.5 * 2 ** 30); // untouched pages: reserved, not resident
  } catch (e) {
    t.skip(`cannot reserve 4.5 GiB of shared memory here (${(e as Error).message})`);
    return;
  }
  const a = new Float32Array(sab, 16);
  a[a.length - 1] = 7;
  const small = new Int32Array(new SharedArrayBuffer(64), 8, 4);
  small[3] = -3;
  const src = `const { parentPort, workerData } = require('node:worker_threads');
    const rebuild = (v) => v.kind === 'f32' ? new Float32Array(v.buffer, v.byteOffset, v.length) : new Int32Array(v.buffer, v.byteOffset, v.length);
    const [big, small, cloned] = [rebuild(workerData.big), rebuild(workerData.small), workerData.cloned];
    parentPort.postMessage({ big: [big.length, big[big.length - 1]], small: [small.length, small[3]], cloned: cloned.length });`;
  const w = new Worker(src, { eval: true, workerData: { big: toSharedView(a), small: toSharedView(small), cloned: a } });
  const [m] = (await once(w, 'message')) as [{ big: [number, number]; small: [number, number]; cloned: number }];
  await w.terminate();
  assert.deepEqual(m.big, [a.length, 7]);
  assert.deepEqual(m.small, [4, -3]);
  // The reason for the views (Node 20: the plain clone of the same array arrives cut to 32 bits of bytes).
  t.diagnostic(`plain clone of a ${a.length}-float view arrived with ${m.cloned} floats (${process.version})`);
  const back = fromSharedView(toSharedView(small));
  assert.ok(back instanceof Int32Array && back.byteOffset === 8 && back[3] === -3);
});
