import { runPolicyConformance } from './policy.case.test.ts';
import { adaptivePolicy } from './adaptive.ts';

runPolicyConformance('adaptive (defaults)', adaptivePolicy(), { moves: true });
// Faster drains and a tight per-step budget, so queued swaps wait and the budget is exercised.
runPolicyConformance('adaptive (drain 16, 1 swap per step)', adaptivePolicy({ drain_every: 16, swaps_per_step: 1 }), { moves: true });
