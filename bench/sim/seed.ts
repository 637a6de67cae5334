// Seed map, held out: a map fitted on the first half of every domain's documents, frozen, scored on traffic
// built only from the second halves, against fixed maps, adaptive, and the oracle.
// Run: npx tsx bench/sim/seed.ts (part of npm run bench:sim).
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { staticPolicy } from '../../src/sim/policies/static.ts';
import { adaptivePolicy } from '../../src/sim/policies/adaptive.ts';
import type { PolicyFactory } from '../../src/sim/policies/policy.ts';
import { identityMap, topHMap, traceCounts } from '../../src/sim/fit.ts';
import { traceSet } from '../../src/sim/traces/trace.ts';
import { splitDocuments } from '../../src/sim/traffic.ts';
import { emit, fitted, fixture, input, pct, run, table } from './common.ts';

const { set, g } = fixture();
const names = [...set.traces.keys()].sort();
const firstHalf = traceSet(names.map((n) => splitDocuments(set.traces.get(n)!, 'first')), 'first halves');
const heldOut = traceSet(names.map((n) => splitDocuments(set.traces.get(n)!, 'second')), 'second halves');
const seedMap = topHMap(traceCounts([...firstHalf.traces.values()], g), g, 'tiny-moe');
const agentMap = fitted(set, g, 'en+code'); // a fixed profile fitted on agent-like traffic (whole traces)
const noProfile = identityMap(g, 'tiny-moe');
const MIXED = `${names.join('+')}:6000`;
const PROSE_FIRST = 'de+ja:512';

const rows: (string | number)[][] = [];
const json: Record<string, unknown>[] = [];
for (const [label, phases] of [['mixed, all 7 domains', MIXED], ['first prose requests (de+ja)', PROSE_FIRST]] as const) {
  for (const users of [1, 4]) {
    const inp = input(heldOut, g, noProfile, phases, users);
    const cases: Array<[string, PolicyFactory]> = [
      ['static: experts 0..48 (no profile)', staticPolicy],
      ['static: en+code-fitted map', (ctx) => staticPolicy({ ...ctx, bootMap: agentMap })],
      ['seed: first-half fit, frozen', (ctx) => staticPolicy({ ...ctx, bootMap: seedMap })],
      ['adaptive from en+code map', (ctx) => adaptivePolicy()({ ...ctx, bootMap: agentMap })],
      ['adaptive from seed', (ctx) => adaptivePolicy()({ ...ctx, bootMap: seedMap })],
      ['oracle (512-step windows)', policyFactory('oracle', { oracleWindow: 512 })],
    ];
    const base = run(cases[1]![1], inp);
    for (const [name, f] of cases) {
      const r = run(f, inp, name);
      const p = r.phases[0]!;
      const h200 = p.byProfile['h200-pcie']!.tokPerSec;
      const gb = p.byProfile['gb300-c2c']!.tokPerSec;
      const vs = (x: number, b: number) => `${x.toFixed(1)} (${((x / b - 1) * 100).toFixed(1)}%)`;
      rows.push([label, users, name, pct(p.coldShare), r.swaps, vs(h200, base.phases[0]!.byProfile['h200-pcie']!.tokPerSec), vs(gb, base.phases[0]!.byProfile['gb300-c2c']!.tokPerSec)]);
      json.push({ protocol: phases, users, policy: name, coldShare: p.coldShare, swaps: r.swaps, tokPerSec: { h200: h200, gb300: gb } });
    }
  }
}
emit('seed', ['# Seed map on held-out traffic', '',
  `Documents of each domain split in halves (contiguous, by document). The seed map is the top-${g.hotPerLayer} of the first halves' counts ` +
  '(through src/residency/fit.ts); all traffic below is built from the second halves only. tok/s modelled; in brackets the change against ' +
  'the fixed en+code-fitted map.', '',
  table(['protocol', 'users', 'policy', 'cold share', 'swaps', 'tok/s h200-pcie', 'tok/s gb300-c2c'], rows)].join('\n'), json);
