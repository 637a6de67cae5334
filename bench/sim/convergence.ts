// Why adaptive ends where it does on the tiny fixture: one long de+ja phase after en+code, adaptive at several
// half-lives and hystereses against fixed maps and oracles, measured over the phase's last 6000 steps.
// Run: npx tsx bench/sim/convergence.ts (part of npm run bench:sim).
import { fitted, fixture, input, emit, pct, table } from './common.ts';
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { staticPolicy } from '../../src/sim/policies/static.ts';
import { replay } from '../../src/sim/replay.ts';
import type { RunInput } from '../../src/sim/run.ts';
import { hotMaskOf, type PolicyFactory } from '../../src/sim/policies/policy.ts';
import { topHMap, traceCounts } from '../../src/sim/fit.ts';
import { documents } from '../../src/sim/traces/trace.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';

const { set, g } = fixture();
const boot = fitted(set, g, 'en+code');
const dejaMap = fitted(set, g, 'de+ja');
const LONG = 15000;
const TAIL = 6000;

function tailShare(f: PolicyFactory, inp: RunInput): { share: number; swaps: number } {
  const r = replay(f({ geometry: inp.geometry, bootMap: inp.bootMap, steps: inp.steps }), inp.steps);
  let c = 0; let n = 0; let swaps = 0;
  for (let s = r.steps - TAIL; s < r.steps; s++) { c += r.cold[s]!; n += r.picks[s]!; swaps += r.swaps[s]!; }
  return { share: c / n, swaps };
}

const rows: (string | number)[][] = [];
const json: Record<string, unknown>[] = [];
for (const users of [1, 4]) {
  const inp = input(set, g, boot, `en+code:3000,de+ja:${LONG}`, users);
  const cases: Array<[string, PolicyFactory]> = [
    ['static (en+code map)', staticPolicy],
    ['fixed de+ja map (in-sample, whole traces)', (ctx) => staticPolicy({ ...ctx, bootMap: dejaMap })],
    ['oracle, window 6000', policyFactory('oracle', { oracleWindow: 6000 })],
    ['oracle, window 512', policyFactory('oracle', { oracleWindow: 512 })],
    ['adaptive (defaults: half-life 250 tokens, hysteresis 1.5)', policyFactory('adaptive')],
    ['adaptive, half-life 500', policyFactory('adaptive', { budgets: { half_life_tokens: 500 } })],
    ['adaptive, half-life 1000', policyFactory('adaptive', { budgets: { half_life_tokens: 1000 } })],
    ['adaptive, half-life 2000', policyFactory('adaptive', { budgets: { half_life_tokens: 2000 } })],
    ['adaptive, half-life 2000, hysteresis 1.2', policyFactory('adaptive', { budgets: { half_life_tokens: 2000, hysteresis: 1.2 } })],
    ['adaptive, half-life 4000', policyFactory('adaptive', { budgets: { half_life_tokens: 4000 } })],
  ];
  for (const [name, f] of cases) {
    const t = tailShare(f, inp);
    rows.push([users, name, pct(t.share), t.swaps]);
    json.push({ users, policy: name, tailColdShare: t.share, tailSwaps: t.swaps });
  }
}

// Per-document skew: each document's picks under its own top-H map (in-sample) versus under the domain
// mix's map. A large gap means a window oracle wins by following documents, which an EWMA with a
// 500-token half-life cannot do when a document lasts <= 512 tokens (1 user).
const docRows: (string | number)[][] = [];
for (const domain of ['de', 'ja', 'en', 'code_js']) {
  const t = set.traces.get(domain)!;
  const mixMap = domain === 'de' || domain === 'ja' ? dejaMap : boot;
  let own = 0; let held = 0; let mix = 0; let picks = 0; let docs = 0;
  const row = g.layers * g.topK;
  for (const [a, b] of documents(t)) {
    if (b - a < 256) continue;
    const m = a + ((b - a) >> 1);
    const part = (x: number, y: number) => ({ ...t, tokens: y - x, ids: t.ids.subarray(x * row, y * row), docStarts: [0] });
    const first = part(a, m);
    const second = part(m, b);
    // In-sample (fitted on the half it scores: optimistic, it also fits noise) and held out (first half -> second).
    own += coldPicks(second.ids, topHMap(traceCounts([second], g), g, 'doc'));
    held += coldPicks(second.ids, topHMap(traceCounts([first], g), g, 'doc'));
    mix += coldPicks(second.ids, mixMap);
    picks += second.ids.length;
    docs++;
  }
  docRows.push([domain, docs, pct(own / picks), pct(held / picks), pct(mix / picks), domain === 'de' || domain === 'ja' ? 'de+ja' : 'en+code']);
}
json.push({ perDocument: docRows });

function coldPicks(ids: Uint16Array, map: RowMap): number {
  const hot = hotMaskOf(map);
  let c = 0;
  for (let i = 0; i < ids.length; i++) if (!hot[(Math.floor(i / g.topK) % g.layers) * g.experts + ids[i]!]) c++;
  return c;
}

emit('convergence', [`# Convergence on a long de+ja phase (${LONG} steps after en+code:3000), cold share over the last ${TAIL} steps`, '',
  table(['users', 'policy', 'cold share', 'swaps in window'], rows), '',
  '## Per-document skew (documents of >= 256 tokens)', '',
  'Scored on the second half of each document: its own top-49 map fitted on that same half (in-sample), fitted on the ' +
  "document's first half (held out), and the domain mix's map (whole traces).", '',
  table(['domain', 'documents', 'own map, in-sample', 'own map, held out (first half)', 'mix map', 'mix map fitted on'], docRows)].join('\n'), json);
