// Shared pieces of the simulator benchmarks: the fixture, the protocols, running policies, writing results.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RowMap } from '../../src/residency/rowmap.ts';
import { gb300C2c } from '../../src/sim/cost/gb300-c2c.ts';
import { h200Pcie } from '../../src/sim/cost/h200-pcie.ts';
import { sidecar } from '../../src/sim/cost/sidecar.ts';
import type { CostProfile } from '../../src/sim/cost/cost-model.ts';
import { topHMap, traceCounts } from '../../src/sim/fit.ts';
import type { Geometry, PolicyFactory } from '../../src/sim/policies/policy.ts';
import { replay } from '../../src/sim/replay.ts';
import { reportOf, type PolicyReport, type RunInput } from '../../src/sim/run.ts';
import { loadTraces, FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import type { TraceSet } from '../../src/sim/traces/trace.ts';
import { buildTraffic, parsePhases } from '../../src/sim/traffic.ts';

export const OUT = 'out/bench-sim';
export const HOT = 49;
export const PROFILES: readonly CostProfile[] = [h200Pcie, gb300C2c, sidecar];

export function fixture(): { set: TraceSet; g: Geometry } {
  const set = loadTraces(FIXTURE_TRACES);
  return { set, g: { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: HOT } };
}

/** Top-H map fitted on whole domains of `set` ("en+code" style names). */
export function fitted(set: TraceSet, g: Geometry, domains: string): RowMap {
  const names = parsePhases(`${domains}:1`, set)[0]!.domains;
  return topHMap(traceCounts(names.map((d) => set.traces.get(d)!), g), g, 'tiny-moe');
}

export function input(set: TraceSet, g: Geometry, bootMap: RowMap, phases: string, users: number, seed = 1): RunInput {
  const ph = parsePhases(phases, set);
  return { geometry: g, bootMap, phases: ph, steps: buildTraffic(set, { phases: ph, users, seed, countTmax: 256 }), profiles: PROFILES };
}

/** Runs a policy; `name` relabels it in tables. Also returns the cold share of the last `tail` steps of each phase. */
export function run(factory: PolicyFactory, inp: RunInput, name?: string, tail = 500): PolicyReport & { tail: number[] } {
  const r = replay(factory({ geometry: inp.geometry, bootMap: inp.bootMap, steps: inp.steps }), inp.steps);
  const rep = reportOf(r, inp);
  const tailShare = rep.phases.map((p) => {
    let c = 0; let n = 0;
    for (let s = p.firstStep + p.steps - Math.min(tail, p.steps); s < p.firstStep + p.steps; s++) { c += r.cold[s]!; n += r.picks[s]!; }
    return n ? c / n : 0;
  });
  return { ...rep, policy: name ?? rep.policy, tail: tailShare };
}

export const pct = (x: number) => `${(x * 100).toFixed(2)}%`;

export function table(head: string[], rows: (string | number)[][]): string {
  return [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
}

/** Prints the markdown and writes NAME.md and NAME.json under out/bench-sim. */
export function emit(name: string, markdown: string, json: unknown): void {
  mkdirSync(OUT, { recursive: true });
  writeFileSync(join(OUT, `${name}.md`), markdown + '\n');
  writeFileSync(join(OUT, `${name}.json`), JSON.stringify(json, null, 1) + '\n');
  console.log(markdown);
  console.log(`\n(wrote ${join(OUT, name)}.md and .json)\n`);
}
