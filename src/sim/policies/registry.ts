// The policies the simulator knows, by name (explicit registry).
import { ResidencyError } from '../../errors.ts';
import type { RowMap } from '../../residency/rowmap.ts';
import type { Budgets } from '../../residency/policy.ts';
import { adaptivePolicy } from './adaptive.ts';
import { followedPolicy } from './followed.ts';
import { lfruPolicy } from './lfru.ts';
import { lruPolicy } from './lru.ts';
import { oraclePolicy } from './oracle.ts';
import type { PolicyFactory } from './policy.ts';
import { seedPolicy } from './seed.ts';
import { staticPolicy } from './static.ts';

export const POLICY_NAMES = ['adaptive', 'static', 'seed', 'lru', 'lfu', 'lfru', 'oracle', 'oracle-phase'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export interface PolicyOptions {
  readonly budgets?: Partial<Budgets>;
  /** The fitted map the seed policy freezes. */
  readonly seedMap?: RowMap;
  /** Copy-on-miss inserts per step (lru, lfu, lfru). */
  readonly insertsPerStep?: number;
  /** LFRU decay half-life, steps. */
  readonly lfruHalfLife?: number;
  /** Window of the 'oracle' policy, steps ('oracle-phase' fits each whole phase). */
  readonly oracleWindow?: number;
  /** Seed prior for 'adaptive': cumulative pick counts, [layer * experts + expert] (ControllerOptions.prior). */
  readonly prior?: ArrayLike<number>;
  /**
   * Moves in the background, this many row copies queued at once: 'adaptive' (AdaptiveOptions.copiesInFlight) and the
   * copy-on-miss policies (lru, lfu, lfru: their hot sets followed through the same schedule, followed.ts).
   */
  readonly copiesInFlight?: number;
}

export function policyFactory(name: string, o: PolicyOptions = {}): PolicyFactory {
  const inserts = o.insertsPerStep ?? 8;
  const background = (f: PolicyFactory): PolicyFactory => (o.copiesInFlight !== undefined ? followedPolicy(f, o.copiesInFlight) : f);
  switch (name as PolicyName) {
    case 'adaptive': return adaptivePolicy(o.budgets, 'adaptive', { ...(o.prior ? { prior: o.prior } : {}), ...(o.copiesInFlight !== undefined ? { copiesInFlight: o.copiesInFlight } : {}) });
    case 'static': return staticPolicy;
    case 'seed': return seedPolicy(o.seedMap);
    case 'lru': return background(lruPolicy({ insertsPerStep: inserts }));
    case 'lfu': return background(lfruPolicy({ insertsPerStep: inserts, halfLifeSteps: Infinity }, 'lfu'));
    case 'lfru': return background(lfruPolicy({ insertsPerStep: inserts, halfLifeSteps: o.lfruHalfLife ?? 500 }));
    case 'oracle': return oraclePolicy(o.oracleWindow ?? 64);
    case 'oracle-phase': return oraclePolicy('phase');
    default:
      throw new ResidencyError('BAD_ARGUMENT', `--policy: unknown '${name}' (have: ${POLICY_NAMES.join(', ')})`);
  }
}
