// The CUDA backend's shape limits are checked from the spec alone (no GPU), before any device memory is used.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkCudaSupport } from './support.ts';
import { parseConfig } from '../../model/config.ts';
import { readFileSync } from 'node:fs';

const tiny = parseConfig(JSON.parse(readFileSync('models/tiny-moe/config.json', 'utf8')), 'tiny-moe');

test('the shipped model fits every row block size, layered and fused', () => {
  for (const threads of [128, 256, 512, 1024]) {
    assert.doesNotThrow(() => checkCudaSupport(tiny, threads, 128, false));
    assert.doesNotThrow(() => checkCudaSupport(tiny, threads, 128, true));
  }
});

test('shapes the kernels would get wrong are refused by reason', () => {
  const refused = (patch: object, re: RegExp, threads = 1024) =>
    assert.throws(() => checkCudaSupport({ ...tiny, ...patch }, threads, 128), (e: Error & { code?: string }) => e.code === 'UNSUPPORTED_MODEL' && re.test(e.message));
  refused({ numHeads: 32, numKvHeads: 8 }, /32 attention heads need more than 8 warps/, 256);
  refused({ numHeads: 16, numKvHeads: 4, headDim: 128, maxPositions: 40960 }, /KiB of shared memory .*40960 positions/);
  refused({ expertIntermediate: 768 }, /expert intermediate 768 is over 128/);
  refused({ hiddenSize: 130 }, /divisible by 8/);
  refused({ numHeads: 3, numKvHeads: 2 }, /not a multiple/);
  assert.throws(() => checkCudaSupport(tiny, 100, 128), /rowThreads 100/);
});
