// A copy-on-miss policy (lru, lfu, lfru) with its moves in the background, as bench:tiered runs it on the device: the
// policy keeps its own hot set, and a Follower moves the banks toward it through the CUDA banks' schedule (PipelineBanks:
// two copies an exchange, `copiesInFlight` queued, each done by the next step boundary). Cold picks count against the
// banks, so the map trails the policy's wishes as it does on the device.
import { Follower } from '../follower.ts';
import { PipelineBanks } from '../model-banks.ts';
import type { Moves, PolicyFactory } from './policy.ts';

export function followedPolicy(inner: PolicyFactory, copiesInFlight: number): PolicyFactory {
  return (ctx) => {
    const policy = inner(ctx);
    const banks = new PipelineBanks(ctx.bootMap, copiesInFlight);
    const follower = new Follower(banks);
    return {
      name: `${policy.name}-bg${copiesInFlight}`, // (lru-bg4: LRU with 4 copies in flight; the instant one is plain lru)
      geometry: ctx.geometry,
      hot: banks.hot,
      // Each landing finishes a queued copy: no more land between two steps than copies are queued.
      movesPerStep: copiesInFlight,
      afterStep(step): Moves {
        banks.step = step.index;
        const wished = policy.afterStep(step);
        return { swaps: follower.follow(policy.hot), copies: 0, refused: wished.refused };
      },
    };
  };
}
