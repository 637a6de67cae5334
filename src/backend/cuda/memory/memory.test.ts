// Splitting the memory budget between the hot bank and the paged KV pool: every expert when they fit beside the pool's
// least, else the most that fit, else the plan's own refusal (what would fit); the pool takes what is left, or its
// fixed size.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEVICE_SLACK_BYTES, blocksFor, hotExpertsThatFit, planMemory, type MemoryNeeds } from './memory.ts';

const GiB = 2 ** 30, MiB = 2 ** 20;
// 2 GiB of other weights, 0.25 GiB per hot expert across layers, 1 GiB workspace, 16 MiB blocks of 16 positions.
const needsAt = (hot: number): MemoryNeeds => ({ weights: 2 * GiB + hot * 0.25 * GiB, workspace: GiB, bytesPerBlock: 16 * MiB, blockSize: 16 });
const least = { minBlocks: blocksFor(4096 * 4, 16) }; // --max-model-len 4096 x min(4, max sequences)

test('all experts hot when they fit the budget; the pool takes what is left', () => {
  const r = hotExpertsThatFit(128, needsAt, 80 * GiB, 0.9, 4096, least);
  assert.equal(r.hot, 128);
  const left = Math.floor(80 * GiB * 0.9) - needsAt(128).weights - GiB - DEVICE_SLACK_BYTES;
  assert.equal(r.plan.kvBlocks, Math.floor(left / (16 * MiB)));
  assert.ok(r.plan.kvBlocks >= least.minBlocks);
});

test('the most hot experts that fit beside the pool\'s least, and the plan that goes with them', () => {
  const total = 40 * GiB, util = 0.9;
  const r = hotExpertsThatFit(128, needsAt, total, util, 4096, least);
  assert.ok(r.hot > 0 && r.hot < 128);
  assert.doesNotThrow(() => planMemory(needsAt(r.hot), total, util, 4096, least));
  assert.throws(() => planMemory(needsAt(r.hot + 1), total, util, 4096, least), /does not fit/);
  assert.ok(r.plan.kvBlocks >= least.minBlocks);
  assert.equal(r.plan.need, needsAt(r.hot).weights + r.plan.kv + GiB + DEVICE_SLACK_BYTES);
});

test('a fixed pool (--kv-cache-tokens / --kv-cache-memory): the bank takes the rest, in whole experts', () => {
  const fixed = { blocks: 1000 }; // 15.6 GiB
  const r = hotExpertsThatFit(128, needsAt, 40 * GiB, 0.9, 4096, fixed);
  assert.equal(r.plan.kvBlocks, 1000);
  const room = Math.floor(40 * GiB * 0.9) - 2 * GiB - GiB - DEVICE_SLACK_BYTES - 1000 * 16 * MiB;
  assert.equal(r.hot, Math.floor(room / (0.25 * GiB)));
});

test('nothing fits, not even with every expert in host memory: the plan\'s refusal says what would', () => {
  assert.throws(() => hotExpertsThatFit(128, needsAt, 3 * GiB, 0.9, 4096, least), /does not fit the GPU memory budget.*the weights and workspace alone need/);
  assert.throws(() => hotExpertsThatFit(128, needsAt, 8 * GiB, 0.9, 4096, least), /KV cache of 16384 positions.*; \d+ positions of KV cache would fit \(--kv-cache-tokens \d+/);
  assert.throws(() => planMemory(needsAt(0), 80 * GiB, 1.5, 4096, least), /--gpu-memory-utilization 1.5: expected a fraction/);
});
