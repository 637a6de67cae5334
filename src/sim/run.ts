// One simulation run: traffic -> a policy -> replay -> metrics and modelled time per hardware profile.
import type { RowMap } from '../residency/rowmap.ts';
import { stepTimesUs, type CostProfile } from './cost/cost-model.ts';
import { DEFAULT_METRICS, phaseMetrics, seconds, windowColdShare, type MetricOptions, type PhaseMetrics } from './metrics.ts';
import type { Geometry, PolicyFactory } from './policies/policy.ts';
import { replay, type ReplayResult } from './replay.ts';
import type { Phase, SimStep } from './traffic.ts';

export interface ProfileFigures {
  /** Modelled seconds of the phase. */
  readonly seconds: number;
  readonly tokPerSec: number;
  readonly t90Seconds: number | null;
  readonly swapsPerMinute: number;
  readonly copiesPerMinute: number;
}

export interface PhaseReport extends PhaseMetrics {
  readonly domains: readonly string[];
  readonly byProfile: Readonly<Record<string, ProfileFigures>>;
}

/** Plain, serializable result of one policy on one protocol (what --json prints). */
export interface PolicyReport {
  readonly policy: string;
  readonly steps: number;
  readonly tokens: number;
  readonly coldShare: number;
  readonly swaps: number;
  readonly copies: number;
  readonly refused: number;
  readonly phases: readonly PhaseReport[];
  /** Cold share per window of metrics.windowSteps steps, for charts. */
  readonly timeline: readonly number[];
  readonly windowSteps: number;
}

export interface RunInput {
  readonly geometry: Geometry;
  readonly bootMap: RowMap;
  readonly phases: readonly Phase[];
  readonly steps: readonly SimStep[];
  readonly profiles: readonly CostProfile[];
  readonly metrics?: MetricOptions;
}

const round = (x: number, d = 6) => Math.round(x * 10 ** d) / 10 ** d;

/** Figures for an existing replay (also used by tests that want the raw replay). */
export function reportOf(r: ReplayResult, input: RunInput): PolicyReport {
  const mo = input.metrics ?? DEFAULT_METRICS;
  const times = input.profiles.map((p) => [p, stepTimesUs(r, p)] as const);
  const phases = phaseMetrics(r, mo).map((m): PhaseReport => {
    const byProfile: Record<string, ProfileFigures> = {};
    for (const [p, us] of times) {
      const secs = seconds(us, m.firstStep, m.firstStep + m.steps);
      byProfile[p.name] = {
        seconds: round(secs), tokPerSec: round(m.tokens / secs, 2),
        t90Seconds: m.t90Steps === null ? null : round(seconds(us, m.firstStep, m.firstStep + m.t90Steps), 3),
        swapsPerMinute: round(m.swaps / (secs / 60), 2), copiesPerMinute: round(m.copies / (secs / 60), 2),
      };
    }
    return { ...m, domains: input.phases[m.phase]!.domains, byProfile };
  });
  let cold = 0; let picks = 0; let tokens = 0; let swaps = 0; let copies = 0; let refused = 0;
  for (let s = 0; s < r.steps; s++) {
    cold += r.cold[s]!; picks += r.picks[s]!; tokens += r.tokens[s]!;
    swaps += r.swaps[s]!; copies += r.copies[s]!; refused += r.refused[s]!;
  }
  return {
    policy: r.policy, steps: r.steps, tokens, coldShare: picks ? cold / picks : 0, swaps, copies, refused, phases,
    timeline: windowColdShare(r, mo.windowSteps).map((x) => round(x)), windowSteps: mo.windowSteps,
  };
}

export function runPolicy(factory: PolicyFactory, input: RunInput): PolicyReport {
  const policy = factory({ geometry: input.geometry, bootMap: input.bootMap, steps: input.steps });
  return reportOf(replay(policy, input.steps), input);
}
