// Controller benchmark: decision rate under a domain shift on the fixture traces, and the controller's
// cost per drain (and per applied swap) in microseconds, at fixture scale and at DeepSeek-V4 scale.
// Run: npm run bench:controller [-- --out out/bench-controller.json] [--traces DIR]
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { Controller } from '../../src/residency/controller.ts';
import { Counter, toRows } from '../../src/residency/counts.ts';
import { fitMap } from '../../src/residency/fit.ts';
import { identityRowMap } from '../../src/residency/rowmap.ts';
import { traceFile } from '../../src/sim/traces/fixture.ts';
import { FIXTURE_TRACES } from '../../src/sim/traces/load.ts';
import { readFileUnzipped } from '../../src/util/gzip-file.ts';

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: 'out/bench-controller.json' },
    traces: { type: 'string', default: join(process.cwd(), FIXTURE_TRACES) },
  },
});
const TRACES = values.traces!;
const L = 6, E = 64, K = 6, HOT = 49, ROW = L * K;
const load = (d: string) => readFileUnzipped(traceFile(TRACES, d));

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
}

// 1. Fixture, batch 1: boot on a map fitted to en+code, GO, then en+code traffic, then de+ja (the shift).
function fixtureShift() {
  const fitOn = ['en', 'code_js', 'code_py'];
  const total = new Float64Array(L * E);
  for (const d of fitOn) { const b = load(d); for (let i = 0; i < b.length; i++) total[(Math.floor(i / K) % L) * E + b[i]!]! += 1; }
  const rows = toRows(total, L, E);
  const boot = fitMap({ version: 1, model: 'tiny-moe', step: 0, decode_steps: 0, half_life: 500, decayed: rows, cumulative: rows }, { hot: HOT });
  const ctl = new Controller({ boot });
  const counter = new Counter(L, E, K);
  ctl.control({ freeze: false, baseline: true }, counter.snapshot());
  const phases = [
    { name: 'en+code', doms: ['en', 'code_js', 'code_py'], steps: 6400 },
    { name: 'de+ja', doms: ['de', 'ja'], steps: 12800 },
  ];
  const drainUs: number[] = [];
  const out: Record<string, unknown>[] = [];
  let step = 0;
  for (const ph of phases) {
    const bufs = ph.doms.map(load);
    const cursor = bufs.map(() => 0);
    let decided = 0, drains = 0, firstDrains: number[] = [], lastShares: number[] = [];
    for (let i = 0; i < ph.steps; i++, step++) {
      const j = i % bufs.length; // round-robin the phase's domains, one token per step
      const b = bufs[j]!;
      if (cursor[j]! + ROW > b.length) cursor[j] = 0;
      const counted = ctl.shouldCount(1);
      if (counted) counter.addPicks(b.subarray(cursor[j]!, cursor[j]! + ROW), 1);
      cursor[j]! += ROW;
      ctl.onStep({ step, tokens: 1, counted });
      if (ctl.drainDue()) {
        const snap = counter.snapshot();
        const t0 = process.hrtime.bigint();
        const d = ctl.drain(step, snap);
        drainUs.push(Number(process.hrtime.bigint() - t0) / 1000);
        decided += d.decided.length;
        drains++;
        if (firstDrains.length < 10) firstDrains.push(d.decided.length);
        lastShares.push(d.coldShare);
        if (lastShares.length > 10) lastShares.shift();
        if (drains === 1) out.push({ phase: ph.name, first_window_cold_share: d.coldShare });
      }
      ctl.applySwaps(ctl.budgets.swaps_per_step);
    }
    out.push({
      phase: ph.name, steps: ph.steps, drains, decided, decided_per_drain: decided / drains,
      decided_first_10_drains: firstDrains, cold_share_last_10_windows: lastShares.reduce((a, b) => a + b, 0) / lastShares.length,
    });
  }
  return { phases: out, drain_us: { p50: percentile(drainUs, 50), p99: percentile(drainUs, 99), max: Math.max(...drainUs) }, stats: ctl.stats };
}

// 2. Cost at scale: 40 layers x 384 experts, 295 hot (DeepSeek-V4.1-Flash on a GB300), 64 tokens per step.
function costAtScale(layers: number, experts: number, hot: number, topK: number, tokensPerStep: number) {
  const ctl = new Controller({ boot: identityRowMap('scale', layers, experts, hot), frozen: false });
  const counter = new Counter(layers, experts, topK);
  let seed = 1;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 4294967296);
  const drainUs: number[] = [];
  const applyUs: number[] = [];
  let applied = 0;
  const routing = new Uint16Array(tokensPerStep * layers * topK);
  for (let step = 0; step < 64 * 200; step++) {
    const shift = Math.floor(step / 3200) * 97; // a new hot region every 50 drains
    for (let i = 0; i < routing.length; i++) routing[i] = (Math.floor(Math.pow(rand(), 3) * experts) + shift) % experts;
    counter.addPicks(routing, tokensPerStep);
    ctl.onStep({ step, tokens: tokensPerStep, counted: true });
    if (ctl.drainDue()) {
      const snap = counter.snapshot();
      const t0 = process.hrtime.bigint();
      ctl.drain(step, snap);
      drainUs.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    const t1 = process.hrtime.bigint();
    const r = ctl.applySwaps(ctl.budgets.swaps_per_step);
    if (r.applied.length) { applyUs.push(Number(process.hrtime.bigint() - t1) / 1000 / r.applied.length); applied += r.applied.length; }
  }
  return {
    geometry: `${layers}x${experts}, ${hot} hot, top-${topK}, ${tokensPerStep} tokens/step`,
    drains: drainUs.length, swaps_applied: applied,
    drain_us: { p50: percentile(drainUs, 50), p99: percentile(drainUs, 99), max: Math.max(...drainUs) },
    apply_us_per_swap: { p50: percentile(applyUs, 50), p99: percentile(applyUs, 99) },
  };
}

fixtureShift(); // warm-up: the first run pays for JIT compilation
const fixture = fixtureShift();
costAtScale(40, 384, 295, 6, 64); // warm-up, as above (the first drains pay for compilation, which would set the p99)
const scale = costAtScale(40, 384, 295, 6, 64);
const result = { bench: 'controller', node: process.version, date: new Date().toISOString(), fixture, scale };
console.log('fixture (tiny-moe, 6x64, 49 hot, batch 1, default budgets, boot = top-49 of en+code, GO at step 0):');
for (const p of fixture.phases) console.log(' ', JSON.stringify(p));
console.log(`  drain cost: p50 ${fixture.drain_us.p50.toFixed(1)} us, p99 ${fixture.drain_us.p99.toFixed(1)} us`);
console.log(`scale (${scale.geometry}): ${scale.drains} drains, ${scale.swaps_applied} swaps`);
console.log(`  drain cost: p50 ${scale.drain_us.p50.toFixed(1)} us, p99 ${scale.drain_us.p99.toFixed(1)} us, max ${scale.drain_us.max.toFixed(1)} us`);
console.log(`  apply (controller side, per swap): p50 ${scale.apply_us_per_swap.p50.toFixed(2)} us, p99 ${scale.apply_us_per_swap.p99.toFixed(2)} us`);
mkdirSync(dirname(values.out!), { recursive: true });
writeFileSync(values.out!, `${JSON.stringify(result, null, 2)}\n`);
console.log(`wrote ${values.out}`);
