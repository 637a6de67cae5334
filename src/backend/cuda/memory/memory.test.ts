// Sizing the hot bank from the memory budget: every expert when they fit, else the most that fit, else the
// plan's own refusal (what would fit).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hotExpertsThatFit, planMemory, type MemoryNeeds } from './memory.ts';

const GiB = 2 ** 30;
// 2 GiB of other weights, 0.25 GiB per hot expert across layers, 1 MiB of KV per position, 1 GiB workspace.
const needsAt = (hot: number): MemoryNeeds => ({ weights: 2 * GiB + hot * 0.25 * GiB, kvPerPosition: 2 ** 20, workspace: GiB });

test('all experts hot when they fit the budget', () => {
  const r = hotExpertsThatFit(128, needsAt, 80 * GiB, 0.9, 4096, 4);
  assert.equal(r.hot, 128);
});

test('the most hot experts that fit, and the plan that goes with them', () => {
  const total = 40 * GiB, util = 0.9;
  const r = hotExpertsThatFit(128, needsAt, total, util, 4096, 4);
  assert.ok(r.hot > 0 && r.hot < 128);
  assert.doesNotThrow(() => planMemory(needsAt(r.hot), total, util, 4096, 4));
  assert.throws(() => planMemory(needsAt(r.hot + 1), total, util, 4096, 4));
  assert.equal(r.plan.need, needsAt(r.hot).weights + r.plan.kv + GiB + 512 * 2 ** 20);
});

test('nothing fits, not even with every expert in host memory: the plan\'s refusal says what would', () => {
  assert.throws(() => hotExpertsThatFit(128, needsAt, 3 * GiB, 0.9, 4096, 4), /does not fit the GPU memory budget/);
});
