// The residual add and RMSNorm job (OP_ADD_NORM: a long step's tokens split between threads): bit-identical to
// linalg.ts addInPlace then rmsnorm on one thread (x and xn, byte for byte), below and above the split, odd widths,
// the worker taking part.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuThreadPool } from './pool.ts';
import { addInPlace, rmsnorm } from '../linalg.ts';
import { sharedAlloc } from '../alloc.ts';
import { mulberry32 } from '../synthetic.ts';
import { bytesOf as bytes } from '../test-helpers.ts';

test('the residual add and norm split by tokens is bit-identical to addInPlace then rmsnorm', async () => {
  const pool = new CpuThreadPool({ threads: 2, banks: [] });
  try {
    await pool.ready();
    const before = pool.workerChunks();
    for (let round = 0; round < 3 || (pool.workerChunks() === before && round < 200); round++) {
      for (const [tokens, n] of [[1, 128], [5, 7], [16, 33], [40, 128], [128, 128]] as const) {
        const rand = mulberry32(tokens * 7 + n);
        const x = sharedAlloc.f32(tokens * n);
        const add = sharedAlloc.f32(tokens * n);
        const weight = sharedAlloc.f32(n);
        for (const a of [x, add, weight]) for (let i = 0; i < a.length; i++) a[i] = (rand() * 2 - 1) * 10 ** Math.floor(rand() * 6 - 3);
        const wantX = x.slice();
        const wantXn = new Float32Array(tokens * n);
        addInPlace(wantX, 0, add, 0, tokens * n);
        for (let t = 0; t < tokens; t++) rmsnorm(wantXn, t * n, wantX, t * n, weight, n, 1e-6);
        const xn = sharedAlloc.f32(tokens * n);
        pool.addNorm(x, add, xn, weight, tokens, n, 1e-6);
        assert.ok(bytes(x).equals(bytes(wantX)) && bytes(xn).equals(bytes(wantXn)), `tokens ${tokens} width ${n}`);
      }
    }
    assert.ok(pool.workerChunks() > before, 'the worker took part');
  } finally {
    pool.dispose();
  }
});
