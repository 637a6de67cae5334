// The cuda backend's host-side parts, without a GPU: CUresult naming, kernel argument packing, descriptor
// layouts, step planning into graph buckets, and the clear NOT_AVAILABLE error where there is no libcuda.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../../errors.ts';
import { checkResult, cudaErrorName, formatBytes } from './errors.ts';
import { packArgs } from './driver.ts';
import { DEFAULT_BUCKETS, bucketFor, planSubsteps } from './plan.ts';
import { MODEL_DEV_BYTES, ROW_DEV_BYTES, STEP_HEADER_BYTES, encodeModel, encodeStep, encodeWork } from './layout.ts';

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
  assert.equal(encodeWork({ hidden: 1n, xn: 2n, pickExpert: 3n, pickWeight: 4n, pickSlot: 5n, partial: 6n, logits: 7n, amax: 8n }).byteLength, 64);
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
