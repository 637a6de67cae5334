// The tiered benchmark's protocols and policies on any executor: expanded fixture traffic (src/sim/expand.ts),
// the simulator's policies (adaptive = the real Controller), the row exchanges of rows.ts.
import type { Budgets } from '../../src/residency/policy.ts';
import { expandTraceSet } from '../../src/sim/expand.ts';
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { adaptivePolicy } from '../../src/sim/policies/adaptive.ts';
import { staticPolicy } from '../../src/sim/policies/static.ts';
import { topHMap, traceCounts } from '../../src/sim/fit.ts';
import { domainsOf, fitOn } from '../../src/sim/setup.ts';
import { readFixtureTraces } from '../../src/sim/traces/fixture.ts';
import { traceSet, type TraceSet } from '../../src/sim/traces/trace.ts';
import { buildTraffic, parsePhases, splitDocuments } from '../../src/sim/traffic.ts';
import type { TieredExecutor } from './executor.ts';
import { figures } from './figures.ts';
import type { TieredGeometry } from './geometry.ts';
import { runTiered, type PlacementMode } from './harness.ts';
import { domainFitPolicy } from './reference-policies.ts';
import type { ProtocolResult } from './report.ts';

export interface Protocol {
  readonly name: string;
  /** Phases as the simulator's --phases ("en+code:600,de+ja:600,en+code:600"). */
  readonly phases: string;
  readonly users: number;
}

export const POLICIES = ['all-hot', 'fixed', 'seed', 'adaptive', 'adaptive-prior', 'seed-adaptive', 'lru', 'oracle', 'oracle-phase', 'domain-fit'] as const;

export interface BenchConfig {
  readonly geometry: TieredGeometry;
  readonly protocols: readonly Protocol[];
  readonly policies: readonly string[];
  /** Adaptive budgets (shortened for short phases; the report says which). */
  readonly budgets: Partial<Budgets>;
  readonly insertsPerStep: number;
  readonly oracleWindow: number;
  readonly fit: string;
  readonly seed: number;
  /**
   * The seed counts dump: cumulative picks [layer * experts + expert] of traffic held out from the protocols
   * (loadBenchInputs). The seed policy's map is its top-H; adaptive-prior uses it as the Controller's prior.
   */
  readonly seedCounts: Float64Array;
}

/** The first and second half of every trace's documents: seed dump and scored traffic never share a document. */
export function splitHalves(set: TraceSet): { first: TraceSet; second: TraceSet } {
  const names = [...set.traces.keys()].sort();
  return {
    first: traceSet(names.map((n) => splitDocuments(set.traces.get(n)!, 'first')), 'first halves'),
    second: traceSet(names.map((n) => splitDocuments(set.traces.get(n)!, 'second')), 'second halves'),
  };
}

export function loadExpanded(dir: string, g: TieredGeometry): TraceSet {
  return expandTraceSet(readFixtureTraces(dir), { layers: g.layers, experts: g.experts });
}

/**
 * What every protocol runs on: the second half of every domain's documents (`set`), and the seed dump
 * counted on the first halves of all domains (`seedCounts`), as a dump from earlier serving would be.
 */
export function loadBenchInputs(dir: string, g: TieredGeometry): { set: TraceSet; seedCounts: Float64Array } {
  const halves = splitHalves(loadExpanded(dir, g));
  const sg = { layers: g.layers, experts: g.experts, topK: g.topK, hotPerLayer: g.hotPerLayer };
  return { set: halves.second, seedCounts: traceCounts([...halves.first.traces.values()], sg) };
}

export function runProtocol(set: TraceSet, p: Protocol, cfg: BenchConfig, exec: TieredExecutor, log: (s: string) => void = () => {}): ProtocolResult {
  const g = cfg.geometry;
  const sg = { layers: g.layers, experts: g.experts, hotPerLayer: g.hotPerLayer, topK: g.topK };
  const phases = parsePhases(p.phases, set);
  const steps = buildTraffic(set, { phases, users: p.users, seed: cfg.seed, countTmax: 256 });
  const bootMap = fitOn(set, sg, domainsOf(cfg.fit, set), 'tiered');
  const seedMap = topHMap(cfg.seedCounts, sg, 'tiered');
  const runs = [];
  for (const name of cfg.policies) {
    const t0 = Date.now();
    let mode: PlacementMode = 'exchange';
    let factory;
    switch (name) {
      case 'all-hot': factory = staticPolicy; mode = 'all-hot'; break;
      case 'fixed': factory = staticPolicy; break;
      case 'seed': factory = policyFactory('seed', { seedMap }); break;
      case 'adaptive': factory = policyFactory('adaptive', { budgets: cfg.budgets }); break;
      case 'adaptive-prior': factory = adaptivePolicy(cfg.budgets, 'adaptive-prior', { prior: cfg.seedCounts }); break;
      // The production set-up: boot on the seed map, adapt with the same dump as prior.
      case 'seed-adaptive': factory = adaptivePolicy(cfg.budgets, 'seed-adaptive', { prior: cfg.seedCounts }); break;
      case 'lru': factory = policyFactory('lru', { insertsPerStep: cfg.insertsPerStep }); break;
      case 'oracle': factory = policyFactory('oracle', { oracleWindow: cfg.oracleWindow }); mode = 'free'; break;
      case 'oracle-phase': factory = policyFactory('oracle-phase'); mode = 'free'; break;
      // The phase's domains' top-H over their whole traces, placed free at the phase start: the reachable reference.
      case 'domain-fit': factory = domainFitPolicy(set, p.phases); mode = 'free'; break;
      default: throw new Error(`tiered: unknown policy '${name}' (have: ${POLICIES.join(', ')})`);
    }
    // The seed policy's rows are laid out from its own map at load (as a server booting with it would).
    runs.push(runTiered(name, factory, exec, { geometry: g, bootMap: name.startsWith('seed') ? seedMap : bootMap, steps, users: p.users, count: name.includes('adaptive'), mode }));
    log(`  ${p.name} ${name}: ${steps.length} steps in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  const hot = runs.find((r) => r.policy === 'all-hot') ?? null;
  return {
    protocol: `${p.name} (${p.users} user${p.users > 1 ? 's' : ''}): ${p.phases}`,
    phases: phases.map((ph) => ph.domains.join('+')),
    runs,
    figures: runs.map((r) => figures(r, hot)),
  };
}
