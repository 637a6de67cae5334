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
// Moves in the background, as the CUDA banks make them: two copies a move, each done by the next step.
runPolicyConformance('adaptive (background moves, 4 copies in flight)', adaptivePolicy({}, 'adaptive', { copiesInFlight: 4 }), { moves: true });
runPolicyConformance('adaptive (background moves, 1 copy in flight)', adaptivePolicy({ drain_every: 16 }, 'adaptive', { copiesInFlight: 1 }), { moves: true });
runPolicyConformance('adaptive (with a prior)', adaptivePolicy({}, 'adaptive', { prior: Array.from({ length: 6 * 64 }, (_, i) => (i * 31) % 17) }), { moves: true });

test('the registry passes a prior to the controller (and none when not given)', () => {
  const ctx = { geometry: { layers: 2, experts: 8, topK: 2, hotPerLayer: 4 }, bootMap: identityRowMap('t', 2, 8, 4), steps: [] };
  const withPrior = policyFactory('adaptive', { prior: Array.from({ length: 16 }, (_, i) => i) })(ctx) as ReturnType<ReturnType<typeof adaptivePolicy>>;
  assert.equal(withPrior.controller.hasPrior, true);
  const without = policyFactory('adaptive', {})(ctx) as ReturnType<ReturnType<typeof adaptivePolicy>>;
  assert.equal(without.controller.hasPrior, false);
});

test('background moves: an exchange lands two steps after its request, no more start than copies are free, and the map trails', () => {
  const g = { layers: 1, experts: 8, topK: 2, hotPerLayer: 4 };
  const policy = adaptivePolicy({ drain_every: 1, min_average: 0.5, move_cost_picks: 0, swaps_per_layer_per_drain: 4 }, 'adaptive', { copiesInFlight: 2 })({ geometry: g, bootMap: identityRowMap('t', 1, 8, 4), steps: [] });
  // Every step picks cold experts 4..7: four swaps are decided at the first drain.
  const step = (index: number) => ({ index, phase: 0, tokens: 2, counted: true, picks: Uint16Array.from([4, 5, 6, 7]) });
  const landedAt: number[] = [];
  for (let i = 0; i < 8; i++) {
    const m = policy.afterStep(step(i));
    for (let k = 0; k < m.swaps; k++) landedAt.push(i);
  }
  // Step 0 requests two (two copy slots), each copies in at boundary 0 and out at 1, landing at 2; the next two follow.
  assert.deepEqual(landedAt, [2, 2, 4, 4]);
  assert.deepEqual([...policy.hot], [0, 0, 0, 0, 1, 1, 1, 1]);
});
