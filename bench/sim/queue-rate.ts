// Queue rate: the three-phase shift with the counter drained every 64, 32 or 16 steps (the other budgets at
// their defaults), T90 after each shift; then the EWMA half-life for contrast. Run: npx tsx bench/sim/queue-rate.ts (part of npm run bench:sim).
import { policyFactory } from '../../src/sim/policies/registry.ts';
import { emit, fitted, fixture, input, pct, run, table } from './common.ts';

const PHASES = 'en+code:3000,de+ja:3000,en+code:3000';
const { set, g } = fixture();
const boot = fitted(set, g, 'en+code');
const rows: (string | number)[][] = [];
const json: Record<string, unknown>[] = [];
for (const users of [1, 4]) {
  // Several document orders: one order's T90 is noisy at this size; the spread is part of the answer.
  // Drain cadence first; then the EWMA half-life at drain 64, the lever that does set recovery speed.
  for (const [drain, half] of [[64, 500], [32, 500], [16, 500], [64, 250], [64, 1000]] as const) {
    const t90: number[][] = [[], []];
    const conv: number[][] = [[], []];
    let swaps = 0;
    let secs: number[][] = [[], []];
    for (const seed of [1, 2, 3, 4, 5]) {
      const r = run(policyFactory('adaptive', { budgets: { drain_every: drain, half_life_tokens: half } }), input(set, g, boot, PHASES, users, seed));
      [1, 2].forEach((ph, i) => {
        const p = r.phases[ph]!;
        t90[i]!.push(p.t90Steps ?? NaN);
        conv[i]!.push(p.converged);
        secs[i]!.push(p.byProfile['h200-pcie']!.t90Seconds ?? NaN);
      });
      swaps += r.swaps;
    }
    const med = (xs: number[]) => { const a = xs.slice().sort((x, y) => x - y); return a[a.length >> 1]!; };
    rows.push([users, drain, half,
      `${med(t90[0]!)} [${t90[0]!.join(', ')}]`, med(secs[0]!).toFixed(2), pct(med(conv[0]!)),
      `${med(t90[1]!)} [${t90[1]!.join(', ')}]`, med(secs[1]!).toFixed(2), pct(med(conv[1]!)),
      (swaps / 5).toFixed(0)]);
    json.push({ users, drainEvery: drain, halfLife: half, t90StepsDeJa: t90[0], t90StepsBack: t90[1], t90SecondsH200DeJa: secs[0], t90SecondsH200Back: secs[1], convergedDeJa: conv[0], convergedBack: conv[1], meanSwaps: swaps / 5 });
    secs = [[], []];
  }
}
emit('queue-rate', [`# Queue rate: ${PHASES}, ${g.hotPerLayer}/${g.experts} hot, adaptive with drain every 64 / 32 / 16 steps`, '',
  'T90 in steps (median over 5 document orders, all five in brackets) and modelled seconds on h200-pcie (median), after the shift to de+ja ' +
  'and after the shift back to en+code; converged = median cold share of the phase second half.', '',
  table(['users', 'drain every', 'half-life', 'T90 -> de+ja (steps)', 's (h200)', 'converged de+ja', 'T90 -> en+code (steps)', 's (h200)', 'converged en+code', 'swaps per run'], rows)].join('\n'), json);
