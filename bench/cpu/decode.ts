// CPU backend speed on a checkpoint: prefill tok/s, and decode tok/s at batch 1 and 4, on the backend
// directly and through the engine, with one thread (the reference) and with N threads (rows shared out
// to worker threads, bit-identical), and the N-thread / 1-thread ratio; each with the JS linear loops
// and with the wasm SIMD kernel (src/backend/cpu/wasm, bit-identical). Prints tables and writes
// out/bench-cpu-decode.json.
// Run: npm run bench:cpu [-- --model DIR --steps N --prompt-tokens N --threads N --simd both|on|off --warm N]
// (--warm: untimed decode steps before each timed row, default 1024; at real shapes, e.g. a 2-layer
// Qwen3-30B-A3B-geometry checkpoint from bench/cpu/real-geometry.ts, `--warm 16 --steps 32 --prompt-tokens 32`;
// --ops: where each backend decode row's step goes, op by op (src/backend/cpu/op-timer.ts), in microseconds a step;
// --prefill-reps N: prefill forwards a row times, the median reported (default 7; 1 makes the JS loops affordable there))
// Side by side with llama.cpp (issue 18): --peer PATH/llama-bench --peer-model FILE.gguf [--rounds R]: each round
// runs our measurements then llama.cpp's (llama-bench pp/tg, llama-batched-bench at batch 4) at the same thread
// counts, prompt length and decode length, and the tables print the ratios from the same run.
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createCpuBackend, type CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { OpTimer } from '../../src/backend/cpu/op-timer.ts';
import { createEngine } from '../../src/engine/engine.ts';
import { runToCompletion } from '../../src/engine/complete.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { packageRoot } from '../../src/cli/generate.ts';
import { runPeer, type PeerFigures } from './peer.ts';
import { bySequence } from '../../src/backend/sequences.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(packageRoot(), 'models/tiny-moe') },
    steps: { type: 'string', default: '256' },
    'prompt-tokens': { type: 'string', default: '128' },
    hot: { type: 'string' },
    threads: { type: 'string', default: String(Math.min(availableParallelism(), 4)) },
    simd: { type: 'string', default: 'both' },
    peer: { type: 'string' },
    'peer-model': { type: 'string' },
    rounds: { type: 'string' },
    warm: { type: 'string', default: '1024' },
    ops: { type: 'boolean', default: false },
    'prefill-reps': { type: 'string', default: '7' },
  },
});
if ((values.peer === undefined) !== (values['peer-model'] === undefined)) throw new Error('--peer PATH/llama-bench and --peer-model FILE.gguf go together');
const ROUNDS = Number(values.rounds ?? (values.peer ? 2 : 1));
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error(`--rounds ${values.rounds}: expected an integer >= 1`);
const STEPS = Number(values.steps);
const PROMPT = Number(values['prompt-tokens']);

const TEXT = `NAME
       ls - list directory contents
SYNOPSIS
       ls [OPTION]... [FILE]...
DESCRIPTION
       List information about the FILEs (the current directory by default).  Sort entries alphabetically if
       none of -cftuvSUX nor --sort is specified.  Mandatory arguments to long options are mandatory for short
       options too.
       -a, --all
              do not ignore entries starting with .
       -A, --almost-all
              do not list implied . and ..
       --author
              with -l, print the author of each file
       -b, --escape
              print C-style escapes for nongraphic characters
       --block-size=SIZE
              with -l, scale sizes by SIZE when printing them; e.g., '--block-size=M'; see SIZE format below`;

// Loaded as the CLI and server load for the CPU backend (bf16 kept as stored at real shapes, RESIDENCY_CPU_BF16;
// experts streamed from the shards into each backend's banks).
const model = await loadModelFor(values.model, 'cpu');
const ids = model.tokenizer.encode(TEXT);
while (ids.length < PROMPT) ids.push(...ids);
const prompt = ids.slice(0, PROMPT);
const placement = values.hot !== undefined ? { hotPerLayer: Number(values.hot) } : undefined;
const THREADS = Number(values.threads);
const SIMD_MODES = values.simd === 'both' ? [false, true] : values.simd === 'on' ? [true] : values.simd === 'off' ? [false] : null;
if (SIMD_MODES === null) throw new Error(`--simd ${values.simd}: expected both, on or off`);
const newBackend = (threads: number, simd: boolean, opTimer?: OpTimer): CpuBackend =>
  createCpuBackend(model.spec, model.weights, { placement, threads, simd, ...(opTimer ? { opTimer } : {}) });
const V = model.spec.vocabSize;

/** Wall and CPU seconds of a piece of work (CPU time stays honest when other processes share the cores). */
interface Timing {
  wall: number;
  cpu: number;
}
function timed<T>(f: () => T): [T, Timing] {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const r = f();
  const c = process.cpuUsage(c0);
  return [r, { wall: (performance.now() - t0) / 1e3, cpu: (c.user + c.system) / 1e6 }];
}

/**
 * Decode runs after a DECODE_CONTEXT-token prompt on the backend and through the engine alike, so both rows time
 * the same attention lengths (llama-bench's tg starts from an empty context). Decoding after the whole prefill
 * prompt instead made the backend row attend over longer positions than the engine's, and read slower.
 */
const DECODE_CONTEXT = Math.min(16, PROMPT);

/** Prefill forwards timed per backend row (their median is reported: a single one varies too much). */
const PREFILL_REPS = Number(values['prefill-reps']);
if (!Number.isInteger(PREFILL_REPS) || PREFILL_REPS < 1) throw new Error(`--prefill-reps ${values['prefill-reps']}: expected an integer >= 1`);

/**
 * Prefill `prompt` as one chunk per sequence (PREFILL_REPS times, the median timed), then, in fresh sequences after a DECODE_CONTEXT-token
 * prompt, `steps` greedy decode steps for `batch` sequences (timed).
 */
function runBackend(backend: CpuBackend, batch: number, steps: number, timer?: OpTimer): { prefill: Timing; decode: Timing } {
  const b = bySequence(backend);
  const prefillChunks = (tokens: number[], seq0: number) => Array.from({ length: batch }, (_, s) => ({ seq: seq0 + s, tokens: tokens.map((t) => (t + s) % V), startPos: 0 }));
  // One prefill forward is short on tiny-moe: the median of PREFILL_REPS, each in fresh sequences.
  const prefills: Timing[] = [];
  for (let r = 0; r < PREFILL_REPS; r++) {
    for (let s = 0; s < batch; s++) b.openSequence(s, prompt.length);
    prefills.push(timed(() => b.forward({ chunks: prefillChunks(prompt, 0), count: false }))[1]);
    for (let s = 0; s < batch; s++) b.closeSequence(s);
  }
  const prefill = prefills.sort((x, y) => x.wall - y.wall)[PREFILL_REPS >> 1]!;
  const context = prompt.slice(0, DECODE_CONTEXT);
  for (let s = 0; s < batch; s++) b.openSequence(s, context.length + steps + 1);
  // The logits land in one buffer reused every step, as the engine's runner passes them (a fresh Float32Array a
  // step cost tiny-moe's decode a large share: docs/results.md, "CPU benchmark method").
  const logitsInto = new Float32Array(batch * V);
  let { logits } = b.forward({ chunks: prefillChunks(context, 0), count: false, logitsInto });
  if (timer) timer.on = true;
  const [, decode] = timed(() => {
    for (let i = 0; i < steps; i++) {
      const step = Array.from({ length: batch }, (_, s) => ({ seq: s, tokens: [argmax(logits, s * V, V)], startPos: context.length + i }));
      ({ logits } = b.forward({ chunks: step, count: true, logitsInto }));
    }
  });
  if (timer) timer.on = false;
  for (let s = 0; s < batch; s++) b.closeSequence(s);
  return { prefill, decode };
}

async function runEngine(threads: number, simd: boolean, batch: number, steps: number): Promise<{ tokens: number; t: Timing }> {
  const backend = newBackend(threads, simd);
  await backend.ready();
  // Warmed as the backend row's backend is (its prefills and WARM_STEPS decode steps): a fresh backend warmed by
  // engine steps alone was timed well below the same engine on a backend warmed that way, which read as engine
  // overhead (the engine's own code is a small share of a step). The engine's timed run still includes its 16-token
  // prompt. Figures: docs/results.md, "CPU benchmark method".
  runBackend(backend, batch, WARM_STEPS);
  const engine = createEngine(backend);
  const requests = (tag: string, maxTokens: number) => Array.from({ length: batch }, (_, s) => ({
    id: `${tag}${s}`,
    promptIds: prompt.slice(0, DECODE_CONTEXT).map((t) => (t + s) % V),
    sampling: { temperature: 0, topP: 1, maxTokens, ignoreEos: true },
  }));
  await runToCompletion(engine, requests('warm', Math.min(256, Math.max(1, WARM_STEPS)))); // the engine's own code (--warm caps it)
  const reqs = requests('r', steps);
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const out = await runToCompletion(engine, reqs);
  const c = process.cpuUsage(c0);
  const t = { wall: (performance.now() - t0) / 1e3, cpu: (c.user + c.system) / 1e6 };
  let tokens = 0;
  for (const r of out.values()) tokens += r.tokens.length;
  await engine.close();
  backend.dispose();
  return { tokens, t };
}

const cores = availableParallelism();
const load = loadavg()[0]!;
console.log(`machine: ${cores} cores (${cpus()[0]?.model ?? 'unknown cpu'}), node ${process.version}, load average ${load.toFixed(2)}${load > cores * 0.5 ? ' (busy: figures understate a quiet machine)' : ''}`);
console.log(`model: ${model.spec.name} (${values.model}), prefill ${prompt.length} tokens, ${STEPS} decode steps after ${DECODE_CONTEXT} prompt tokens, hot per layer ${placement?.hotPerLayer ?? model.spec.numExperts}`);

/**
 * Untimed decode steps each measured backend (and each engine's backend) runs first. V8 tiers each thread's code up
 * as it runs, and a pool's workers are fresh threads: a new 2-thread backend decodes at less than half its plateau
 * over its first few hundred steps. So every row is timed after this many steps on the backend it times, as
 * llama-bench times after its own warm-up run (docs/results.md, "CPU benchmark method").
 */
const WARM_STEPS = Number(values.warm);
if (!Number.isInteger(WARM_STEPS) || WARM_STEPS < 0) throw new Error(`--warm ${values.warm}: expected an integer >= 0`);

interface Row {
  what: string;
  threads: number;
  simd: boolean;
  batch: number;
  tokens: number;
  wallTokPerS: number;
  cpuTokPerS: number;
  /** CPU seconds per wall second: how many cores the run kept busy. */
  cores: number;
}
const rows: (Row & { round: number })[] = [];
/** --ops: each backend decode row's op times (ms summed over its timed steps) and calls. */
const opRows: { round: number; threads: number; simd: boolean; batch: number; steps: number; stepUs: number; ms: Map<string, number>; calls: Map<string, number> }[] = [];
let round = 0;
const row = (what: string, threads: number, simd: boolean, batch: number, tokens: number, t: Timing): void => {
  rows.push({ round, what, threads, simd, batch, tokens, wallTokPerS: tokens / t.wall, cpuTokPerS: tokens / t.cpu, cores: t.cpu / t.wall });
};
const threadCounts = THREADS > 1 ? [1, THREADS] : [1];
const peerRows: (PeerFigures & { round: number; threads: number })[] = [];
for (round = 0; round < ROUNDS; round++) {
  for (const simd of SIMD_MODES) for (const threads of threadCounts) {
    for (const batch of [1, 4]) {
      const timer = values.ops ? Object.assign(new OpTimer(), { on: false }) : undefined;
      const b = newBackend(threads, simd, timer);
      await b.ready(); // workers started (a fresh backend's first steps would otherwise run on one thread)
      runBackend(b, batch, WARM_STEPS);
      const r = runBackend(b, batch, STEPS, timer);
      if (timer) opRows.push({ round, threads, simd, batch, steps: STEPS, stepUs: (r.decode.wall * 1e6) / STEPS, ms: new Map(timer.ms), calls: new Map(timer.calls) });
      b.dispose();
      row('prefill (backend)', threads, simd, batch, batch * prompt.length, r.prefill);
      row('decode (backend)', threads, simd, batch, batch * STEPS, r.decode);
    }
    for (const batch of [1, 4]) {
      const r = await runEngine(threads, simd, batch, STEPS);
      row('decode (engine)', threads, simd, batch, r.tokens, r.t);
    }
  }
  // The peer right after, at the same thread counts and lengths (alternating rounds share the machine's state).
  if (values.peer) for (const threads of threadCounts) peerRows.push({ round, threads, ...runPeer(values.peer, values['peer-model']!, { threads, prompt: PROMPT, gen: STEPS }, 4) });
}

console.log('');
console.log('tok/s by wall clock, and by this process\'s CPU time; "cores" is CPU time / wall time (how many');
console.log('cores the run kept busy). With one thread, tok/s cpu is the fairer figure when other processes');
console.log('share the cores; with N threads, wall clock is the point (CPU time includes the workers\' spin).');
console.log('');
console.log('| round | measure            | threads | simd | batch | tokens | tok/s wall | tok/s cpu | cores |');
console.log('|-------|--------------------|---------|------|-------|--------|------------|-----------|-------|');
for (const r of rows) {
  console.log(
    `| ${String(r.round + 1).padStart(5)} | ${r.what.padEnd(18)} | ${String(r.threads).padStart(7)} | ${(r.simd ? 'on' : 'off').padStart(4)} | ${String(r.batch).padStart(5)} | ${String(r.tokens).padStart(6)} | ${r.wallTokPerS.toFixed(1).padStart(10)} | ${r.cpuTokPerS.toFixed(1).padStart(9)} | ${r.cores.toFixed(2).padStart(5)} |`,
  );
}
if (peerRows.length > 0) {
  // Ours: the backend rows with the SIMD kernels when they ran (the default), else the JS loops.
  const simd = SIMD_MODES.includes(true);
  const ours = (rd: number, what: string, threads: number, batch: number): number =>
    rows.find((r) => r.round === rd && r.what === what && r.threads === threads && r.batch === batch && r.simd === simd)!.wallTokPerS;
  console.log('');
  console.log(`side by side with llama.cpp (${values.peer}, ${values['peer-model']}), same prompt (${PROMPT}) and decode (${STEPS}) lengths, tok/s by wall clock:`);
  console.log('');
  console.log('| round | measure | threads | llama.cpp | ours | ours / llama.cpp |');
  console.log('|---|---|---|---|---|---|');
  for (const p of peerRows) {
    const line = (what: string, peer: number, us: number): void => console.log(`| ${p.round + 1} | ${what} | ${p.threads} | ${peer.toFixed(1)} | ${us.toFixed(1)} | ${(us / peer).toFixed(2)}x |`);
    line('decode batch 1', p.tg, ours(p.round, 'decode (backend)', p.threads, 1));
    if (p.tgBatch) line(`decode batch ${p.tgBatch.batch}`, p.tgBatch.tokS, ours(p.round, 'decode (backend)', p.threads, p.tgBatch.batch));
    line(`prefill ${PROMPT} tokens`, p.pp, ours(p.round, 'prefill (backend)', p.threads, 1));
  }
}
if (opRows.length > 0) {
  console.log('');
  console.log('where a backend decode step goes (--ops), us a step by op; "rest" is the step outside these ops:');
  for (const o of opRows) {
    console.log('');
    console.log(`round ${o.round + 1}, ${o.threads} thread${o.threads > 1 ? 's' : ''}, simd ${o.simd ? 'on' : 'off'}, batch ${o.batch}: ${o.stepUs.toFixed(1)} us a step`);
    console.log('| op | us a step | calls a step | share |');
    console.log('|---|---|---|---|');
    let sum = 0;
    for (const [k, ms] of [...o.ms].sort((x, y) => y[1] - x[1])) {
      const us = (ms * 1e3) / o.steps;
      sum += us;
      console.log(`| ${k} | ${us.toFixed(1)} | ${(o.calls.get(k)! / o.steps).toFixed(1)} | ${((100 * us) / o.stepUs).toFixed(1)}% |`);
    }
    console.log(`| rest | ${(o.stepUs - sum).toFixed(1)} | | ${((100 * (o.stepUs - sum)) / o.stepUs).toFixed(1)}% |`);
  }
}
if (THREADS > 1) {
  console.log('');
  console.log(`${THREADS} threads vs 1 thread, tok/s by wall clock:`);
  console.log('');
  console.log('| measure            | simd | batch | 1 thread | N threads | ratio |');
  console.log('|--------------------|------|-------|----------|-----------|-------|');
  for (const r of rows.filter((x) => x.threads === THREADS)) {
    const base = rows.find((x) => x.round === r.round && x.threads === 1 && x.simd === r.simd && x.what === r.what && x.batch === r.batch)!;
    console.log(
      `| ${r.what.padEnd(18)} | ${(r.simd ? 'on' : 'off').padStart(4)} | ${String(r.batch).padStart(5)} | ${base.wallTokPerS.toFixed(1).padStart(8)} | ${r.wallTokPerS.toFixed(1).padStart(9)} | ${(r.wallTokPerS / base.wallTokPerS).toFixed(2).padStart(4)}x |`,
    );
  }
}

if (SIMD_MODES.length === 2) {
  console.log('');
  console.log('SIMD kernel vs JS loops, tok/s by wall clock:');
  console.log('');
  console.log('| measure            | threads | batch | simd off | simd on | ratio |');
  console.log('|--------------------|---------|-------|----------|---------|-------|');
  for (const r of rows.filter((x) => x.simd)) {
    const base = rows.find((x) => x.round === r.round && !x.simd && x.threads === r.threads && x.what === r.what && x.batch === r.batch)!;
    console.log(
      `| ${r.what.padEnd(18)} | ${String(r.threads).padStart(7)} | ${String(r.batch).padStart(5)} | ${base.wallTokPerS.toFixed(1).padStart(8)} | ${r.wallTokPerS.toFixed(1).padStart(7)} | ${(r.wallTokPerS / base.wallTokPerS).toFixed(2).padStart(4)}x |`,
    );
  }
}

const outDir = join(packageRoot(), 'out');
mkdirSync(outDir, { recursive: true });
const file = join(outDir, 'bench-cpu-decode.json');
writeFileSync(file, `${JSON.stringify({ version: 1, bench: 'cpu-decode', date: new Date().toISOString(), cores, cpu: cpus()[0]?.model, node: process.version, loadAverage: load, model: model.spec.name, promptTokens: prompt.length, decodeContext: DECODE_CONTEXT, decodeSteps: STEPS, hotPerLayer: placement?.hotPerLayer ?? model.spec.numExperts, threads: THREADS, simd: values.simd, rounds: ROUNDS, results: rows, peer: values.peer ? { bench: values.peer, model: values['peer-model'], results: peerRows } : null }, null, 2)}\n`);
console.log(`\nwrote ${file}`);
