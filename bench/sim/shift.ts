// Three-phase shift on the fixture traces: en+code -> de+ja -> en+code, 49 of 64 hot, boot map fitted on
// en+code, every policy. Cold share per phase (whole phase, converged median, last 500 steps), T90, moves,
// modelled tok/s. Run: npm run bench:sim (or npx tsx bench/sim/shift.ts).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { coldShareSvg } from '../../src/sim/report.ts';
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { OUT, emit, fitted, fixture, input, pct, run, table } from './common.ts';

const PHASES = 'en+code:3000,de+ja:3000,en+code:3000';
const { set, g } = fixture();
const boot = fitted(set, g, 'en+code');
const seedMap = fitted(set, g, 'en+code+de+ja');
const POLICIES = ['adaptive', 'static', 'seed', 'lru', 'lfu', 'lfru', 'oracle'];

const sections: string[] = [`# Three-phase shift: ${PHASES}, ${g.hotPerLayer}/${g.experts} hot, boot map fitted on en+code`, '',
  'seed = a map fitted on en+code+de+ja (whole traces), frozen; oracle = top-H of each 512-step window, free moves. ' +
  'converged = median of 64-step windows over the second half of the phase; last500 = the last 500 steps; T90 = steps from the phase ' +
  'start until the 256-step centred cold share falls to settled + 10% of (peak - settled), settled = the median of that centred series ' +
  'over the second half. adaptive-bg4 = adaptive with moves in the background on the CUDA banks\' schedule, 4 copies in flight ' +
  '(each done by the next step); lru-bg4 = LRU\'s hot set followed through the same schedule, as bench:tiered runs LRU on the device. tok/s modelled for a 40 x 384 ' +
  'DeepSeek-V4.1-Flash-like model (src/sim/cost/); moves/min counts fixture moves per modelled minute (each stands for 40/6 target-layer moves). ' +
  'T90 of policies that do not move (static, seed) only measures the traffic\'s own settling.', ''];
const json: Record<string, unknown> = {};
mkdirSync(OUT, { recursive: true });
for (const users of [1, 4]) {
  const inp = input(set, g, boot, PHASES, users);
  const reports = POLICIES.map((p) => run(policyFactory(p, { seedMap, oracleWindow: 512 }), inp));
  reports.splice(1, 0, run(policyFactory('adaptive', { copiesInFlight: 4 }), inp, 'adaptive-bg4'));
  reports.splice(POLICIES.indexOf('lru') + 2, 0, run(policyFactory('lru', { copiesInFlight: 4 }), inp, 'lru-bg4'));
  reports.push(run(policyFactory('oracle-phase'), inp));
  json[`users${users}`] = reports.map(({ timeline, ...r }) => ({ ...r, timeline }));
  const rows = reports.flatMap((r) => r.phases.map((p) => [
    r.policy, `${p.phase + 1}: ${p.domains.join('+')}`, pct(p.coldShare), pct(p.converged), pct(r.tail[p.phase]!), pct(p.peak),
    p.t90Steps ?? '-', p.byProfile['h200-pcie']!.t90Seconds?.toFixed(2) ?? '-', p.byProfile['gb300-c2c']!.t90Seconds?.toFixed(2) ?? '-',
    p.swaps, p.copies, p.refused, (p.byProfile['h200-pcie']!.swapsPerMinute + p.byProfile['h200-pcie']!.copiesPerMinute).toFixed(0),
    p.byProfile['h200-pcie']!.tokPerSec.toFixed(1), p.byProfile['gb300-c2c']!.tokPerSec.toFixed(1), p.byProfile['sidecar']!.tokPerSec.toFixed(1),
  ]));
  sections.push(`## ${users} user(s)`, '', table(['policy', 'phase', 'cold share', 'converged', 'last500', 'peak', 'T90 steps', 'T90 s h200', 'T90 s gb300',
    'swaps', 'copies', 'refused', 'moves/min h200', 'tok/s h200-pcie', 'tok/s gb300-c2c', 'tok/s sidecar'], rows), '');
  writeFileSync(join(OUT, `shift-users${users}.svg`), coldShareSvg(reports.filter((r) => r.policy !== 'oracle-phase'), `cold share per 64 steps, ${PHASES}, ${users} user(s)`));
  sections.push(`![cold share](shift-users${users}.svg)`, '');
}
// The oracle's window sets how good "the limit" is: a short window fits each window's noise.
const inp1 = input(set, g, boot, PHASES, 1);
const oracleRows = [64, 256, 512, 1000, 3000].map((w) => {
  const r = run(policyFactory('oracle', { oracleWindow: w }), inp1, `oracle-${w}`);
  return [w, ...r.phases.map((p) => `${pct(p.converged)} (${p.swaps} moves)`)];
});
sections.push('## Oracle window (1 user): converged cold share per phase', '', table(['window steps', 'en+code', 'de+ja', 'en+code'], oracleRows), '');
emit('shift', sections.join('\n'), json);
