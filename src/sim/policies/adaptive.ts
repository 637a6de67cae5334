// Adaptive: ours. The residency Controller itself (the object the engine drives), fed by the host twin of
// the device counter; nothing of the policy is re-implemented here.
import { Controller } from '../../residency/controller.ts';
import { Counter } from '../../residency/counts.ts';
import type { DrainReport } from '../../residency/controller.ts';
import type { Budgets, Swap } from '../../residency/policy.ts';
import { PipelineBanks } from '../model-banks.ts';
import { hotMaskOf, type Moves, type Policy, type PolicyContext } from './policy.ts';

export interface AdaptivePolicy {
  /** The controller, for tests and the lockstep check (read its map, stats, pending queue). */
  readonly controller: Controller;
  /** Applied swaps in order, with the step after which each was applied. */
  readonly log: Array<{ step: number; swap: Swap }>;
  /** Every drain's report, in order (what the engine turns into telemetry.jsonl lines). */
  readonly drains: DrainReport[];
}

export interface AdaptiveOptions {
  /** A seed prior for the controller (cumulative pick counts, [layer * experts + expert]; ControllerOptions.prior). */
  readonly prior?: ArrayLike<number>;
  /**
   * Moves in the background, as the CUDA banks make them (../../backend/move-pipeline.ts): this many row copies queued
   * at once, each done by the next step boundary, two per exchange, `spareRows` (default the banks') per layer. Unset: every
   * swap lands between the steps it was decided in (the CPU banks).
   */
  readonly copiesInFlight?: number;
  readonly spareRows?: number;
}

/**
 * Per step, exactly what the engine does: count the step's picks if the controller says so, then
 * `tick` (drain when due, decide, apply at most swaps_per_step, stale-checked). Starts adapting at once
 * (the controller boots frozen by default and waits for a GO; the simulator gives it at step 0).
 * `opts.prior` is weighed by budgets.prior_picks_per_expert. With `opts.copiesInFlight` the steps are the
 * driver's with background banks instead (engine/residency-driver.ts `swap`): land what finished, request
 * no more than the banks can start, land again; the map changes as exchanges land.
 */
export function adaptivePolicy(budgets: Partial<Budgets> = {}, name = 'adaptive', opts: AdaptiveOptions = {}):
  (ctx: PolicyContext) => Policy & AdaptivePolicy {
  return (ctx) => {
    if (opts.copiesInFlight !== undefined) return backgroundAdaptive(ctx, budgets, name, opts);
    const { g, controller, counter, hot, log, drains, moveHot } = parts(ctx, budgets, opts);
    const exchange = (s: Swap) => moveHot(s.layer, s.hotExpert, s.coldExpert);
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

/** What both kinds of adaptive run on: the controller (adapting from step 0), the host counter, the hot mask, the logs. */
function parts(ctx: PolicyContext, budgets: Partial<Budgets>, opts: AdaptiveOptions) {
  const g = ctx.geometry;
  const hot = hotMaskOf(ctx.bootMap);
  return {
    g,
    hot,
    /** Expert `leave` of `layer` goes cold, `enter` hot. */
    moveHot: (layer: number, leave: number, enter: number): void => {
      hot[layer * g.experts + leave] = 0;
      hot[layer * g.experts + enter] = 1;
    },
    controller: new Controller({ boot: ctx.bootMap, budgets, frozen: false, ...(opts.prior ? { prior: opts.prior } : {}) }),
    counter: new Counter(g.layers, g.experts, g.topK),
    log: [] as AdaptivePolicy['log'],
    drains: [] as DrainReport[],
  };
}

function backgroundAdaptive(ctx: PolicyContext, budgets: Partial<Budgets>, name: string, opts: AdaptiveOptions): Policy & AdaptivePolicy {
  const { g, controller, counter, log, drains } = parts(ctx, budgets, opts);
  // The banks' model (its hot mask is the map the steps run with: it changes as exchanges land).
  const banks = new PipelineBanks(ctx.bootMap, opts.copiesInFlight!, opts.spareRows);
  return {
    name,
    geometry: g,
    hot: banks.hot,
    // Each landing finishes a queued copy: no more land between two steps than copies are queued.
    movesPerStep: opts.copiesInFlight!,
    controller,
    log,
    drains,
    afterStep(step): Moves {
      banks.step = step.index;
      const counted = controller.shouldCount(step.tokens)
        && counter.addPicks(step.picks, step.tokens, controller.budgets.count_tmax);
      controller.onStep({ step: step.index, tokens: step.tokens, counted });
      if (controller.drainDue()) drains.push(controller.drain(step.index, counter.snapshot()));
      // As the driver (engine/residency-driver.ts `swap`): land what finished, request no more than the banks can
      // start, land again (exchanges that land while it requests are reported by the banks' next takeLanded).
      let swaps = 0;
      const settle = (): void => {
        for (const x of banks.takeLanded()) {
          log.push({ step: step.index, swap: controller.land(x.layer, x.hotRow, x.coldRow) });
          swaps++;
        }
      };
      settle();
      const { refused } = controller.requestSwaps(Math.min(controller.budgets.swaps_per_step, banks.startable),
        (s) => banks.requestSwap(s.layer, s.hotRow, s.coldRow));
      settle();
      return { swaps, copies: 0, refused: refused.length };
    },
  };
}
