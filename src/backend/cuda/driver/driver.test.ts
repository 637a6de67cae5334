// The driver binding without a GPU: CUresult naming, kernel argument packing, and the clear NOT_AVAILABLE error
// where there is no libcuda.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../../../errors.ts';
import { checkResult, cudaErrorName, formatBytes } from './errors.ts';
import { packArgs } from './driver.ts';

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

test('loading the driver where there is no libcuda gives NOT_AVAILABLE, not a crash', async () => {
  const { loadDriver } = await import('./driver.ts');
  await assert.rejects(loadDriver('/nonexistent/libcuda.so.1'), (e: unknown) => {
    assert.ok(e instanceof ResidencyError);
    assert.equal(e.code, 'NOT_AVAILABLE');
    assert.match(e.message, /libcuda|koffi/);
    return true;
  });
});
