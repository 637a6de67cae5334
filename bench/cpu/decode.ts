// CPU backend speed on a checkpoint: prefill tok/s, and decode tok/s at batch 1 and 4, on the backend
// directly and through the engine. Prints a table and writes out/bench-cpu-decode.json.
// Run: npm run bench:cpu [-- --model DIR --steps N --prompt-tokens N]
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createCpuBackend, type CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { createEngine } from '../../src/engine/engine.ts';
import { runToCompletion } from '../../src/engine/complete.ts';
import { greedy } from '../../src/engine/sampler.ts';
import { loadModel } from '../../src/model/load.ts';
import { packageRoot } from '../../src/cli/generate.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(packageRoot(), 'models/tiny-moe') },
    steps: { type: 'string', default: '256' },
    'prompt-tokens': { type: 'string', default: '128' },
    hot: { type: 'string' },
  },
});
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

const model = await loadModel(values.model);
const ids = model.tokenizer.encode(TEXT);
while (ids.length < PROMPT) ids.push(...ids);
const prompt = ids.slice(0, PROMPT);
const placement = values.hot !== undefined ? { hotPerLayer: Number(values.hot) } : undefined;
const newBackend = (): CpuBackend => createCpuBackend(model.spec, model.weights, { placement });
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

/** Prefill `prompt` as one chunk per sequence, then `steps` greedy decode steps for `batch` sequences. */
function runBackend(b: CpuBackend, batch: number, steps: number): { prefill: Timing; decode: Timing } {
  for (let s = 0; s < batch; s++) b.openSequence(s, prompt.length + steps + 1);
  const chunks = Array.from({ length: batch }, (_, s) => ({ seq: s, tokens: prompt.map((t) => (t + s) % V), startPos: 0 }));
  let [{ logits }, prefill] = timed(() => b.forward({ chunks, count: false }));
  const [, decode] = timed(() => {
    for (let i = 0; i < steps; i++) {
      const step = Array.from({ length: batch }, (_, s) => ({ seq: s, tokens: [greedy(logits, s * V, V)], startPos: prompt.length + i }));
      ({ logits } = b.forward({ chunks: step, count: true }));
    }
  });
  for (let s = 0; s < batch; s++) b.closeSequence(s);
  return { prefill, decode };
}

async function runEngine(batch: number, steps: number): Promise<{ tokens: number; t: Timing }> {
  const engine = createEngine(newBackend());
  const reqs = Array.from({ length: batch }, (_, s) => ({
    id: `r${s}`,
    promptIds: prompt.slice(0, 16).map((t) => (t + s) % V),
    sampling: { temperature: 0, topP: 1, maxTokens: steps, ignoreEos: true },
  }));
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const out = await runToCompletion(engine, reqs);
  const c = process.cpuUsage(c0);
  const t = { wall: (performance.now() - t0) / 1e3, cpu: (c.user + c.system) / 1e6 };
  let tokens = 0;
  for (const r of out.values()) tokens += r.tokens.length;
  await engine.close();
  return { tokens, t };
}

const cores = availableParallelism();
const load = loadavg()[0]!;
console.log(`machine: ${cores} cores (${cpus()[0]?.model ?? 'unknown cpu'}), node ${process.version}, load average ${load.toFixed(2)}${load > cores * 0.5 ? ' (busy: figures understate a quiet machine)' : ''}`);
console.log(`model: ${model.spec.name} (${values.model}), prompt ${prompt.length} tokens, ${STEPS} decode steps, hot per layer ${placement?.hotPerLayer ?? model.spec.numExperts}`);

// Warm the JIT before measuring.
runBackend(newBackend(), 4, 32);
runBackend(newBackend(), 1, 32);

const rows: { what: string; batch: number; tokens: number; wallTokPerS: number; cpuTokPerS: number }[] = [];
const row = (what: string, batch: number, tokens: number, t: Timing): void => {
  rows.push({ what, batch, tokens, wallTokPerS: tokens / t.wall, cpuTokPerS: tokens / t.cpu });
};
for (const batch of [1, 4]) {
  const r = runBackend(newBackend(), batch, STEPS);
  row('prefill (backend)', batch, batch * prompt.length, r.prefill);
  row('decode (backend)', batch, batch * STEPS, r.decode);
}
for (const batch of [1, 4]) {
  const r = await runEngine(batch, STEPS);
  row('decode (engine)', batch, r.tokens, r.t);
}

const LLAMA_CPP_DECODE = 1135; // llama.cpp on this checkpoint, 2-core machine, batch 1 (the lead's figure)
console.log('');
console.log('tok/s by wall clock, and by this process\'s CPU time (equal on a quiet machine; CPU time is the');
console.log('fairer figure when other processes share the cores). The backend runs on one thread.');
console.log('');
console.log('| measure            | batch | tokens | tok/s wall | tok/s cpu | cpu vs llama.cpp b1 |');
console.log('|--------------------|-------|--------|------------|-----------|---------------------|');
for (const r of rows) {
  const ratio = r.what.startsWith('decode') ? `${(r.cpuTokPerS / LLAMA_CPP_DECODE).toFixed(2)}x` : '';
  console.log(
    `| ${r.what.padEnd(18)} | ${String(r.batch).padStart(5)} | ${String(r.tokens).padStart(6)} | ${r.wallTokPerS.toFixed(1).padStart(10)} | ${r.cpuTokPerS.toFixed(1).padStart(9)} | ${ratio.padStart(19)} |`,
  );
}

const outDir = join(packageRoot(), 'out');
mkdirSync(outDir, { recursive: true });
const file = join(outDir, 'bench-cpu-decode.json');
writeFileSync(file, `${JSON.stringify({ version: 1, bench: 'cpu-decode', date: new Date().toISOString(), cores, cpu: cpus()[0]?.model, node: process.version, loadAverage: load, model: model.spec.name, promptTokens: prompt.length, decodeSteps: STEPS, hotPerLayer: placement?.hotPerLayer ?? model.spec.numExperts, llamaCppDecodeB1: LLAMA_CPP_DECODE, results: rows }, null, 2)}\n`);
console.log(`\nwrote ${file}`);
