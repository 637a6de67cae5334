// bench:tiered (H200): tiered experts at real size through the product's CUDA backend. A make-checkpoint
// checkpoint (qwen3-30b-a3b geometry) is served with H of E experts per layer hot (the rest read in place
// from pinned host memory); real text from prompts.json, routed by the model's own router, walks a domain
// shift; each policy runs the same tokens. Fixed and seed maps are fitted on held-out halves of the
// documents, counted by the product's own counter.
//   node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz [--hot 64] [--users 1]
//     [--phases en+code:3000,de+ja:3000,en+code:3000] [--policies all-hot,fixed,seed,adaptive,lru,oracle-phase]
//     [--budgets JSON] [--fit-steps 1500] [--max-doc 512] [--out DIR] [--trace-out DIR] [--copies-in-flight N]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Backend } from '../../src/backend/backend.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { HostExpertLane } from '../../src/backend/cuda/host-lane/lane.ts';
import { splitText } from '../../src/backend/cuda/host-lane/split.ts';
import { parseMemoryFlags } from '../../src/cli/memory-flags.ts';
import { createBackend, type BackendModel } from '../../src/backend/registry.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { loadTokenizer } from '../../src/model/tokenizer.ts';
import { moeLayerCount } from '../../src/model/spec.ts';
import { topHMap } from '../../src/sim/fit.ts';
import { openTraceFile } from '../../src/sim/traces/recorder.ts';
import { lruPolicy } from '../../src/sim/policies/lru.ts';
import type { Geometry } from '../../src/sim/policies/policy.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';
import { runPolicy, type PolicyKind, type PolicyRun } from './run-policy.ts';
import { loadDocs, parsePhases, Walk, type Docs } from './traffic.ts';
import { chartSvg, summarize, tableMarkdown } from './real-report.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

const { values: v } = parseArgs({
  options: {
    model: { type: 'string' }, prompts: { type: 'string' }, hot: { type: 'string', default: '64' }, users: { type: 'string', default: '1' },
    phases: { type: 'string', default: 'en+code:3000,de+ja:3000,en+code:3000' },
    policies: { type: 'string', default: 'all-hot,fixed,seed,adaptive,lru,oracle-phase' },
    budgets: { type: 'string' }, 'fit-steps': { type: 'string', default: '1500' }, 'max-doc': { type: 'string', default: '512' },
    'counter-steps': { type: 'string', default: '4000' }, backend: { type: 'string', default: 'cuda' }, out: { type: 'string' }, tag: { type: 'string' }, 'steps-json': { type: 'boolean', default: false },
    'trace-out': { type: 'string' },
    // The host expert lane on the tiered backends: threads ('auto': the CPUs less 2) and a fixed share (default: the split measured while serving).
    'host-experts': { type: 'string' }, 'host-expert-share': { type: 'string' }, 'host-expert-parts': { type: 'string' },
    // Row copies the banks queue at once (the move pipeline's width; default: the banks').
    'copies-in-flight': { type: 'string' },
  },
});
if (!v.model || !v.prompts) throw new Error('--model DIR (a make-checkpoint folder) and --prompts prompts.json are required');
const H = Number(v.hot);
const users = Number(v.users);
const maxDoc = Number(v['max-doc']);
const policies = v.policies.split(',');
const out = v.out ?? 'out/tiered';
mkdirSync(out, { recursive: true });
const tag = v.tag ?? `${users}u`;

const tok = await loadTokenizer(v.model);
const { fit, walk } = loadDocs(v.prompts, tok, maxDoc);
const phases = parsePhases(v.phases, walk);
const cs = Number(v['counter-steps']);
if (!Number.isInteger(cs) || cs < 40) throw new Error(`--counter-steps: expected an integer >= 40 (blocks of 20 steps off, then on), got ${v['counter-steps']}`);
const backendName = v.backend === 'cpu' ? 'cpu' : 'cuda';
const m = await loadModelFor(v.model, backendName);
const s = m.spec;
const g: Geometry = { layers: moeLayerCount(s), experts: s.numExperts, hotPerLayer: H, topK: s.topK };
const seqs = Math.max(16, users);
const log = (msg: string): void => console.error(`[tiered ${tag}] ${msg}`);

/** The product's counter over `steps` steps of `docs` walked by 16 users (what a dump from serving it holds). */
function countTraffic(be: Backend, docs: Docs, domains: readonly string[], steps: number): Float64Array {
  const before = be.readCounter();
  const w = new Walk(docs, 16);
  const seqs = new DirectSequences(be);
  const phase = { name: 'fit', domains, steps };
  for (let i = 0; i < steps; i++) {
    const { chunks, close, open } = w.next(0, phase);
    for (const q of close) seqs.close(q);
    for (const o of open) seqs.open(o.seq, o.capacity);
    seqs.forward({ chunks, count: true });
  }
  for (const q of w.openSeqs()) seqs.close(q);
  const after = be.readCounter();
  return Float64Array.from(after, (x, i) => (x - before[i]!) >>> 0);
}

const runs: PolicyRun[] = [];
const t0 = performance.now();
// All hot: fit the maps (en+code for fixed, every domain for seed), then the all-hot lane.
/** The product's backend: cuda (KV sized for the documents) or cpu (tiny models: a dry run of the bench). */
const hostExperts = parseMemoryFlags({ 'host-experts': v['host-experts'], 'host-expert-share': v['host-expert-share'], 'host-expert-parts': v['host-expert-parts'] }).hostExperts;
const copies = v['copies-in-flight'] === undefined ? undefined : Number(v['copies-in-flight']);
if (copies !== undefined && !(Number.isInteger(copies) && copies >= 1)) throw new Error(`--copies-in-flight: expected an integer >= 1, got ${v['copies-in-flight']}`);
const makeBackend = async (placement?: RowMap): Promise<Backend> => backendName === 'cpu'
  ? createBackend('cpu', m as BackendModel, { ...(placement ? { placement } : {}), threads: 'auto' })
  : createCuda(m, { ...(placement ? { placement } : {}), maxModelLen: maxDoc + 8, maxNumSeqs: seqs, ...(placement && hostExperts ? { hostExperts } : {}), ...(copies ? { copiesInFlight: copies } : {}) });
let allHot = await makeBackend();
log(`loaded all-hot in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
const fitSteps = Number(v['fit-steps']);
const fixedMap = topHMap(countTraffic(allHot, fit, phases[0]!.domains, fitSteps), g, s.name);
const seedMap = topHMap(countTraffic(allHot, fit, [...fit.keys()], fitSteps), g, s.name);
let phaseMaps: RowMap[] | null = null;
if (policies.includes('all-hot') || policies.includes('oracle-phase')) {
  // --trace-out DIR: the all-hot lane's routing as JSONL traces (src/sim/traces), one a phase (phase-01-..., in order
  // by name), so the simulator can replay exactly these steps phase by phase (`residency simulate --traces DIR
  // --phases recorded`) to tune budgets off the device.
  const traceDir = v['trace-out'];
  if (traceDir) mkdirSync(traceDir, { recursive: true });
  const traces = phases.map((ph, i) => (traceDir ? openTraceFile(join(traceDir, `phase-${String(i + 1).padStart(2, '0')}-${ph.domains.join('+')}.jsonl`), g, `bench:tiered ${s.name} ${users} user(s) ${v.phases}, phase ${i + 1}`) : null));
  const r = runPolicy(allHot, { name: 'all-hot', kind: 'static' }, phases, walk, users,
    traceDir ? (chunks, routing, ph) => traces[ph]!.recorder.recordStep(chunks.map((c) => ({ seq: c.seq, startPos: c.startPos, tokens: c.tokens.length })), routing) : undefined);
  for (const t of traces) t?.close();
  if (policies.includes('all-hot')) runs.push(r);
  phaseMaps = r.phaseCounts.map((c) => topHMap(c, g, s.name));
  log(`all-hot: median ${median(r.stepMs).toFixed(3)} ms/step`);
}
// The counter's cost on the all-hot backend (its steps have no cold reads to drown the difference): the same
// steps with counting off and on, interleaved in blocks of 20, median step of each. The noise beside it: the off
// blocks split in two (every other one), compared the same way; a cost inside it is not measured, only bounded.
// 4,000 steps by default: fewer left a noise above the 0.5% the counter's cost must be told from (docs/results.md).
const counter = { off: [] as number[], on: [] as number[], offA: [] as number[], offB: [] as number[] };
{
  const w = new Walk(walk, users);
  const seqs = new DirectSequences(allHot);
  for (let i = 0; i < cs; i++) {
    const { chunks, close, open } = w.next(0, phases[0]!);
    for (const q of close) seqs.close(q);
    for (const o of open) seqs.open(o.seq, o.capacity);
    const block = Math.floor(i / 20);
    const on = block % 2 === 1;
    const t = performance.now();
    seqs.forward({ chunks, count: on });
    const ms = performance.now() - t;
    (on ? counter.on : counter.off).push(ms);
    if (!on) (block % 4 === 0 ? counter.offA : counter.offB).push(ms);
  }
  for (const q of w.openSeqs()) seqs.close(q);
}
const counterShare = (median(counter.on) - median(counter.off)) / median(counter.off);
const counterNoise = Math.abs(median(counter.offA) - median(counter.offB)) / median(counter.off);
allHot.dispose();
allHot = null as unknown as Backend;

// Tiered: H of E hot, booted on the fixed map; every other policy on the same backend, one after another.
const be = await makeBackend(fixedMap);
log(`tiered: ${(be as { hotReason?: string }).hotReason ?? ''}`);
const budgets = v.budgets ? JSON.parse(v.budgets) : undefined;
const lanes: Record<string, PolicyKind> = {
  fixed: { name: 'fixed', kind: 'static', map: fixedMap },
  seed: { name: 'seed', kind: 'static', map: seedMap },
  adaptive: { name: 'adaptive', kind: 'adaptive', map: fixedMap, ...(budgets ? { budgets } : {}) },
  lru: { name: 'lru', kind: 'follow', map: fixedMap, make: (boot) => lruPolicy({ insertsPerStep: 8 })({ geometry: g, bootMap: boot, steps: [] }) },
  ...(phaseMaps ? { 'oracle-phase': { name: 'oracle-phase', kind: 'phase-maps', maps: phaseMaps } as PolicyKind } : {}),
};

for (const name of policies) {
  if (name === 'all-hot') continue;
  const kind = lanes[name];
  if (!kind) throw new Error(`--policies: unknown policy '${name}' (have all-hot, ${Object.keys(lanes).join(', ')})`);
  const t = performance.now();
  const r = runPolicy(be, kind, phases, walk, users);
  runs.push(r);
  const lane = (be as { hostLane?: HostExpertLane }).hostLane?.stats();
  log(`${name}: ${((performance.now() - t) / 1000).toFixed(1)} s, median ${median(r.stepMs).toFixed(3)} ms/step, ${r.landed} moves landed` +
    (lane ? `; host lane so far: ${lane.requests} requests, ${(lane.busyMs / Math.max(1, lane.requests) * 1000).toFixed(0)} us each; ${splitText(lane.split)}` : ''));
  writeResults(); // after every policy: a run cut short keeps what it measured
}

be.dispose();
console.log(writeResults());

function writeResults(): string {
  const summary = summarize(runs, phases, users);
  const md = tableMarkdown(summary, { H, E: s.numExperts, users, layers: s.numLayers, counterShare, counterNoise });
  writeFileSync(join(out, `tiered-${tag}.md`), md);
  writeFileSync(join(out, `tiered-${tag}.json`), JSON.stringify({ H, users, phases, summary, counter: { share: counterShare, noise: counterNoise, offMs: median(counter.off), onMs: median(counter.on) } }, null, 1));
  writeFileSync(join(out, `tiered-${tag}.svg`), chartSvg(runs, phases, `${s.name}: ${H}/${s.numExperts} hot, ${users} user(s)`));
  if (v['steps-json']) writeFileSync(join(out, `steps-${tag}.json`), JSON.stringify(runs.map((r) => ({ policy: r.policy, stepMs: Array.from(r.stepMs, (x) => +x.toFixed(4)), cold: Array.from(r.cold), picks: Array.from(r.picks), moving: Array.from(r.moving) }))));
  return md;
}

function median(xs: ArrayLike<number>): number {
  const a = Array.from(xs).sort((x, y) => x - y);
  return a.length ? a[a.length >> 1]! : 0;
}
