// The cuda backend's host-side parts, without a GPU: CUresult naming, kernel argument packing, descriptor
// layouts, step planning into graph buckets, and the clear NOT_AVAILABLE error where there is no libcuda.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../../errors.ts';
import { checkResult, cudaErrorName, formatBytes } from './errors.ts';
import { packArgs } from './driver.ts';
import { ATTN_SPLIT_MIN, DEFAULT_BUCKETS, attnGridFor, attnMaxSplits, attnSplitsOf, bucketFor, planSubsteps } from './plan.ts';
import { MODEL_DEV_BYTES, ROW_DEV_BYTES, STEP_HEADER_BYTES, WORK_DEV_BYTES, encodeModel, encodeStep, encodeWork } from './layout.ts';

test('checkResult names the CUresult, the call and the size', () => {
  assert.doesNotThrow(() => checkResult(0, 'cuMemAlloc', '1 B'));
  assert.throws(() => checkResult(2, 'cuMemAlloc', formatBytes(1.2 * 2 ** 30)), (e: unknown) => {
    assert.ok(e instanceof ResidencyError);
    assert.equal(e.code, 'CUDA_ERROR');
    assert.equal(e.message, 'CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc(1.2 GiB)');
    return true;
  });
  assert.equal(cudaErrorName(700), 'CUDA_ERROR_ILLEGAL_ADDRESS');
  assert.equal(cudaErrorName(12345), 'CUDA_ERROR_12345');
  assert.equal(cudaErrorName(12345, () => 'CUDA_ERROR_FROM_DRIVER'), 'CUDA_ERROR_FROM_DRIVER');
  assert.equal(formatBytes(36 * 1024), '36.0 KiB');
});

test('packArgs: one pointer per argument, each at its value, 8-byte values aligned', () => {
  const base = 0x1000n;
  const { pointers, values } = packArgs({ address: () => base }, [{ u64: 0xdeadbeefn }, { i32: -3 }, { f32: 1.5 }, { u64: 7n }, { bytes: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]) }]);
  const ptr = (i: number): number => Number(pointers.readBigUInt64LE(8 * i) - base);
  assert.deepEqual([0, 1, 2, 3, 4].map(ptr), [0, 8, 12, 16, 24]);
  assert.equal(values.readBigUInt64LE(0), 0xdeadbeefn);
  assert.equal(values.readInt32LE(8), -3);
  assert.equal(values.readFloatLE(12), 1.5);
  assert.equal(values.readBigUInt64LE(16), 7n);
  assert.deepEqual([...values.subarray(24, 32)], [1, 2, 3, 4, 5, 6, 7, 8]);
  // The values live in the pointers' own allocation: the buffer handed to the driver keeps them alive.
  assert.equal(pointers.buffer, values.buffer);
});

test('descriptor layouts match kernels/common.cuh', () => {
  const dims = { H: 128, nh: 2, nkv: 1, hd: 64, E: 64, K: 6, I: 48, V: 8192, L: 6, normTopk: true, hotRows: 49, maxPos: 2048, eps: 1e-6, theta: 10000 };
  const mb = Buffer.from(encodeModel(dims, { embed: 1n, finalNorm: 2n, lmHead: 3n, counter: 4n, layers: 5n }));
  assert.equal(mb.byteLength, MODEL_DEV_BYTES);
  assert.equal(mb.readInt32LE(40), 49); // hot_rows
  assert.equal(mb.readFloatLE(52), 10000); // theta
  assert.equal(mb.readBigUInt64LE(56 + 8 * 3), 4n); // counter
  const step = new Uint8Array(STEP_HEADER_BYTES + 4 * ROW_DEV_BYTES);
  const n = encodeStep(step, true, [{ token: 9, pos: 3, valid: true, cap: 16, kv: 0x100n }], 4);
  const sb = Buffer.from(step);
  assert.equal(n, STEP_HEADER_BYTES + 4 * ROW_DEV_BYTES);
  assert.deepEqual([sb.readInt32LE(0), sb.readInt32LE(4)], [1, 1]);
  assert.deepEqual([sb.readInt32LE(16), sb.readInt32LE(20), sb.readInt32LE(24), sb.readInt32LE(28)], [9, 3, 1, 16]);
  assert.equal(sb.readBigUInt64LE(32), 0x100n);
  assert.equal(sb.readInt32LE(16 + ROW_DEV_BYTES + 8), 0, 'padding rows are invalid');
  const wb = Buffer.from(encodeWork({ hidden: 1n, xn: 2n, pickExpert: 3n, pickWeight: 4n, pickSlot: 5n, partial: 6n, logits: 7n, amax: 8n, attnPart: 9n, attnDone: 10n }));
  assert.equal(wb.byteLength, WORK_DEV_BYTES);
  assert.deepEqual([wb.readBigUInt64LE(64), wb.readBigUInt64LE(72)], [9n, 10n]); // attn_part, attn_done after amax
});

test('bucketFor picks the smallest captured bucket', () => {
  assert.deepEqual([1, 2, 3, 5, 9, 16].map((n) => bucketFor(n, DEFAULT_BUCKETS)), [1, 2, 4, 8, 16, 16]);
  assert.throws(() => bucketFor(17, DEFAULT_BUCKETS), /no graph bucket/);
});

test('planSubsteps: one token per sequence per sub-step, in order, split at the largest bucket', () => {
  const chunks = [
    { seq: 10, tokens: [1, 2, 3], startPos: 0 },
    { seq: 11, tokens: [4], startPos: 7 },
    { seq: 12, tokens: [5, 6], startPos: 2 },
  ];
  const plan = planSubsteps(chunks, 2);
  const show = plan.map((rows) => rows.map((r) => `${r.seq}@${r.pos}:${r.token}${r.last ? '!' : ''}#${r.tokenIndex}`).join(' '));
  assert.deepEqual(show, ['10@0:1#0 11@7:4!#3', '12@2:5#4', '10@1:2#1 12@3:6!#5', '10@2:3!#2']);
  for (const rows of plan) assert.equal(new Set(rows.map((r) => r.seq)).size, rows.length, 'a sequence appears once per sub-step');
});

test('loading the driver where there is no libcuda gives NOT_AVAILABLE, not a crash', async () => {
  const { loadDriver } = await import('./driver.ts');
  await assert.rejects(loadDriver('/nonexistent/libcuda.so.1'), (e: unknown) => {
    assert.ok(e instanceof ResidencyError);
    assert.equal(e.code, 'NOT_AVAILABLE');
    assert.match(e.message, /libcuda|koffi/);
    return true;
  });
});

test('attention split: one block up to ATTN_SPLIT_MIN positions, then balanced non-empty chunks within the grid', () => {
  assert.deepEqual(attnSplitsOf(ATTN_SPLIT_MIN, 16), { splits: 1, chunk: ATTN_SPLIT_MIN }, 'short contexts keep the one-block path');
  assert.deepEqual(attnSplitsOf(5000, 1), { splits: 1, chunk: 5000 }, 'max splits 1 turns the split off');
  assert.deepEqual(attnSplitsOf(1025, 16), { splits: 9, chunk: 114 });
  assert.deepEqual(attnSplitsOf(257, 16), { splits: 3, chunk: 86 });
  assert.deepEqual(attnSplitsOf(2048, 4), { splits: 4, chunk: 512 }, 'capped by the grid: longer chunks');
  for (let n = ATTN_SPLIT_MIN + 1; n <= 40960; n += 37) {
    for (const max of [2, 3, 16, 33, 132, 264]) {
      const { splits, chunk } = attnSplitsOf(n, max);
      assert.ok(splits >= 2 && splits <= max, `n ${n} max ${max}: ${splits} splits`);
      assert.ok((splits - 1) * chunk < n && splits * chunk >= n, `n ${n} max ${max}: every chunk non-empty, all covered`);
    }
  }
  // H200 (132 SMs), 2048 positions: 16 chunks of 128 at every bucket up to 16 rows (16 x 16 blocks resident).
  assert.deepEqual([1, 2, 4, 8, 16].map((b) => attnMaxSplits(b, 132, 2048)), [16, 16, 16, 16, 16]);
  assert.equal(attnMaxSplits(16, 132, 40960), 16);
  assert.equal(attnMaxSplits(1, 132, 40960), 264);
  assert.equal(attnMaxSplits(16, 4, 2048), 1, 'a small GPU keeps one block per row at big buckets');
});

test('attention grid by position: short (rows x 1) while every row reads <= 256 positions, long (rows x max splits) once any row reads more', () => {
  const short = { grid: 'short', splits: 1 };
  const long16 = { grid: 'long', splits: 16 };
  // The boundary: position 255 reads 256 positions (the one-block path), position 256 reads 257.
  assert.equal(ATTN_SPLIT_MIN, 256);
  assert.deepEqual(attnGridFor([ATTN_SPLIT_MIN - 1], 16), short, 'pos 255 (256 positions read): short');
  assert.deepEqual(attnGridFor([ATTN_SPLIT_MIN], 16), long16, 'pos 256 (257 positions read): long');
  assert.deepEqual(attnGridFor([0, 64, 255], 16), short, 'all rows at or under 256 positions');
  assert.deepEqual(attnGridFor([3, 256, 10, 0], 16), long16, 'one row past 256 positions moves the whole step');
  assert.deepEqual(attnGridFor([2047, 100], 4), { grid: 'long', splits: 4 }, 'long grid height = the bucket\'s max splits');
  assert.deepEqual(attnGridFor([2047], 1), short, 'split off (max splits 1): always the one-block grid');
  // A sequence decoding across the boundary switches grids exactly once, at pos 256.
  const grids = [250, 254, 255, 256, 257, 1000].map((p) => attnGridFor([p, 4], 16).grid);
  assert.deepEqual(grids, ['short', 'short', 'short', 'long', 'long', 'long']);
  // Agrees with the kernel's rule: a short step never has a row the long grid would split.
  for (let p = 0; p < 600; p++) {
    const { grid } = attnGridFor([p], 16);
    assert.equal(grid === 'long', attnSplitsOf(p + 1, 16).splits > 1, `pos ${p}`);
  }
});
