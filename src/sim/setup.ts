// Builds a run from command-line style options: traces, protocol, boot map, seed map, profiles.
import { readFileSync } from 'node:fs';
import { ResidencyError } from '../errors.ts';
import { parseRowMap, type RowMap } from '../residency/rowmap.ts';
import { DEFAULT_COUNT_TMAX } from '../residency/counts.ts';
import type { Budgets } from '../residency/policy.ts';
import { profileByName, profiles as allProfiles } from './cost/profiles.ts';
import { identityMap, topHMap, traceCounts } from './fit.ts';
import type { Geometry } from './policies/policy.ts';
import type { PolicyOptions } from './policies/registry.ts';
import type { RunInput } from './run.ts';
import { loadTraces } from './traces/load.ts';
import type { TraceSet } from './traces/trace.ts';
import { buildTraffic, parsePhases, recordedSteps, type Phase, type SimStep } from './traffic.ts';

export interface SimOptions {
  readonly traces: string;
  readonly phases: string;
  readonly hot: number;
  readonly users: number;
  readonly seed: number;
  /** A map file to boot with; else `fit` domains; else experts 0..H-1. */
  readonly map?: string;
  /** Domains ("en+code") whose whole traces give the boot map (top-H). */
  readonly fit?: string;
  /** Domains whose whole traces give the seed policy's map; default: every domain of the protocol. */
  readonly seedFrom?: string;
  readonly profile?: string;
  readonly budgets?: Partial<Budgets>;
  readonly insertsPerStep?: number;
  readonly oracleWindow?: number;
  /** Moves in the background (adaptive, lru, lfu, lfru), this many row copies queued at once (the CUDA banks'); unset: instant. */
  readonly copiesInFlight?: number;
  readonly model?: string;
}

export interface Prepared {
  readonly set: TraceSet;
  readonly input: RunInput;
  readonly policyOptions: PolicyOptions;
}

/** Domains named like a phase ("en+code"), expanded the same way. */
export function domainsOf(spec: string, set: TraceSet): string[] {
  return parsePhases(`${spec}:1`, set)[0]!.domains.slice();
}

export function fitOn(set: TraceSet, g: Geometry, domains: readonly string[], model: string): RowMap {
  return topHMap(traceCounts(domains.map((d) => set.traces.get(d)!), g), g, model);
}

export function prepare(o: SimOptions): Prepared {
  const set = loadTraces(o.traces);
  if (!Number.isInteger(o.hot) || o.hot < 1 || o.hot >= set.experts) {
    throw new ResidencyError('BAD_ARGUMENT', `--hot must be an integer in 1..${set.experts - 1} (experts per layer: ${set.experts}), got ${o.hot}`);
  }
  const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: o.hot };
  const model = o.model ?? 'sim';
  const recorded = o.phases === 'recorded';
  const phases: Phase[] = recorded
    ? [...set.traces.values()].map((t) => ({ domains: [t.name], steps: 0 }))
    : parsePhases(o.phases, set);
  let bootMap: RowMap;
  if (o.map) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(o.map, 'utf8'));
    } catch (err) {
      throw new ResidencyError('BAD_MAP', `--map ${o.map}: cannot read JSON (${(err as Error).message})`);
    }
    bootMap = parseRowMap(json, o.map);
    if (bootMap.layers !== g.layers || bootMap.experts !== g.experts || bootMap.hot_per_layer !== g.hotPerLayer) {
      throw new ResidencyError('BAD_MAP', `--map ${o.map}: geometry ${bootMap.layers}x${bootMap.experts} hot ${bootMap.hot_per_layer} does not match the traces with --hot (${g.layers}x${g.experts} hot ${g.hotPerLayer})`);
    }
  } else if (o.fit) {
    bootMap = fitOn(set, g, domainsOf(o.fit, set), model);
  } else {
    bootMap = identityMap(g, model);
  }
  const seedDomains = o.seedFrom ? domainsOf(o.seedFrom, set) : [...new Set(phases.flatMap((p) => p.domains))];
  const seedMap = fitOn(set, g, seedDomains, model);
  const countTmax = o.budgets?.count_tmax ?? DEFAULT_COUNT_TMAX;
  let steps: SimStep[];
  if (recorded) {
    // Engine-recorded traces replayed step for step, one phase per trace file.
    steps = [];
    [...set.traces.values()].forEach((t, p) => {
      for (const s of recordedSteps(t, countTmax)) steps.push({ ...s, index: steps.length, phase: p });
      phases[p] = { domains: [t.name], steps: steps.filter((s) => s.phase === p).length };
    });
  } else {
    steps = buildTraffic(set, { phases, users: o.users, seed: o.seed, countTmax });
  }
  const profiles = o.profile ? [profileByName(o.profile)] : allProfiles.slice();
  return {
    set,
    input: { geometry: g, bootMap, phases, steps, profiles },
    policyOptions: { budgets: o.budgets, seedMap, insertsPerStep: o.insertsPerStep, oracleWindow: o.oracleWindow, copiesInFlight: o.copiesInFlight },
  };
}
