// Why adaptive ends where it does on the tiny fixture: one long de+ja phase after en+code, adaptive at several
// half-lives and hystereses against fixed maps and oracles, measured over the phase's last 6000 steps.
// Run: npx tsx bench/sim/convergence.ts (part of npm run bench:sim).
import { fitted, fixture, input, emit, pct, table } from './common.ts';
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { staticPolicy } from '../../src/sim/policies/static.ts';
import { replay } from '../../src/sim/replay.ts';
import type { RunInput } from '../../src/sim/run.ts';
import type { PolicyFactory } from '../../src/sim/policies/policy.ts';

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
    ['adaptive (defaults: half-life 500, hysteresis 1.5)', policyFactory('adaptive')],
    ['adaptive, half-life 250', policyFactory('adaptive', { budgets: { half_life_steps: 250 } })],
    ['adaptive, half-life 1000', policyFactory('adaptive', { budgets: { half_life_steps: 1000 } })],
    ['adaptive, half-life 2000', policyFactory('adaptive', { budgets: { half_life_steps: 2000 } })],
    ['adaptive, half-life 2000, hysteresis 1.2', policyFactory('adaptive', { budgets: { half_life_steps: 2000, hysteresis: 1.2 } })],
    ['adaptive, half-life 4000', policyFactory('adaptive', { budgets: { half_life_steps: 4000 } })],
  ];
  for (const [name, f] of cases) {
    const t = tailShare(f, inp);
    rows.push([users, name, pct(t.share), t.swaps]);
    json.push({ users, policy: name, tailColdShare: t.share, tailSwaps: t.swaps });
  }
}
emit('convergence', [`# Convergence on a long de+ja phase (${LONG} steps after en+code:3000), cold share over the last ${TAIL} steps`, '',
  table(['users', 'policy', 'cold share', 'swaps in window'], rows)].join('\n'), json);
