import { test } from 'node:test';
import assert from 'node:assert/strict';
import { identityRowMap } from '../../residency/rowmap.ts';
import { runPolicyConformance } from './policy.case.test.ts';
import { adaptivePolicy } from './adaptive.ts';
import { policyFactory } from './registry.ts';

runPolicyConformance('adaptive (defaults)', adaptivePolicy(), { moves: true });
// Faster drains and a tight per-step budget, so queued swaps wait and the budget is exercised.
runPolicyConformance('adaptive (drain 16, 1 swap per step)', adaptivePolicy({ drain_every: 16, swaps_per_step: 1 }), { moves: true });
// With a seed prior (fixture geometry 6 x 64): the controller's rule changes, the policy contract does not.
runPolicyConformance('adaptive (with a prior)', adaptivePolicy({}, 'adaptive', { prior: Array.from({ length: 6 * 64 }, (_, i) => (i * 31) % 17) }), { moves: true });

test('the registry passes a prior to the controller (and none when not given)', () => {
  const ctx = { geometry: { layers: 2, experts: 8, topK: 2, hotPerLayer: 4 }, bootMap: identityRowMap('t', 2, 8, 4), steps: [] };
  const withPrior = policyFactory('adaptive', { prior: Array.from({ length: 16 }, (_, i) => i) })(ctx) as ReturnType<ReturnType<typeof adaptivePolicy>>;
  assert.equal(withPrior.controller.hasPrior, true);
  const without = policyFactory('adaptive', {})(ctx) as ReturnType<ReturnType<typeof adaptivePolicy>>;
  assert.equal(without.controller.hasPrior, false);
});
