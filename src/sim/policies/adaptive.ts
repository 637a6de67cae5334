// Adaptive: ours. The residency Controller itself (the object the engine drives), fed by the host twin of
// the device counter; nothing of the policy is re-implemented here.
import { Controller } from '../../residency/controller.ts';
import { Counter } from '../../residency/counts.ts';
import type { DrainReport } from '../../residency/controller.ts';
import type { Budgets, Swap } from '../../residency/policy.ts';
import { hotMaskOf, type Moves, type Policy, type PolicyContext } from './policy.ts';

export interface AdaptivePolicy {
  /** The controller, for tests and the lockstep check (read its map, stats, pending queue). */
  readonly controller: Controller;
  /** Applied swaps in order, with the step after which each was applied. */
  readonly log: Array<{ step: number; swap: Swap }>;
  /** Every drain's report, in order (what the engine turns into telemetry.jsonl lines). */
  readonly drains: DrainReport[];
}

/**
 * Per step, exactly what the engine does: count the step's picks if the controller says so, then
 * `tick` (drain when due, decide, apply at most swaps_per_step, stale-checked). Starts adapting at once
 * (the controller boots frozen by default and waits for a GO; the simulator gives it at step 0).
 * `opts.prior`: a seed prior for the controller (cumulative pick counts, [layer * experts + expert]; see
 * ControllerOptions.prior), weighed by budgets.prior_picks_per_expert.
 */
export function adaptivePolicy(budgets: Partial<Budgets> = {}, name = 'adaptive', opts: { prior?: ArrayLike<number> } = {}):
  (ctx: PolicyContext) => Policy & AdaptivePolicy {
  return (ctx) => {
    const g = ctx.geometry;
    const controller = new Controller({ boot: ctx.bootMap, budgets, frozen: false, ...(opts.prior ? { prior: opts.prior } : {}) });
    const counter = new Counter(g.layers, g.experts, g.topK);
    const hot = hotMaskOf(ctx.bootMap);
    const log: AdaptivePolicy['log'] = [];
    const drains: DrainReport[] = [];
    const exchange = (s: Swap) => {
      hot[s.layer * g.experts + s.hotExpert] = 0;
      hot[s.layer * g.experts + s.coldExpert] = 1;
    };
    return {
      name,
      geometry: g,
      hot,
      get movesPerStep() { return controller.budgets.swaps_per_step; },
      controller,
      log,
      drains,
      afterStep(step): Moves {
        const counted = controller.shouldCount(step.tokens)
          && counter.addPicks(step.picks, step.tokens, controller.budgets.count_tmax);
        const r = controller.tick({ step: step.index, tokens: step.tokens, counted }, () => counter.snapshot(), exchange);
        for (const swap of r.applied) log.push({ step: step.index, swap });
        if (r.drain) drains.push(r.drain);
        return { swaps: r.applied.length, copies: 0, refused: r.refused.length };
      },
    };
  };
}
