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

/** Prefill `prompt` as one chunk per sequence, then `steps` greedy decode steps for `batch` sequences. */
function runBackend(b: CpuBackend, batch: number, steps: number): { prefillS: number; decodeS: number } {
  for (let s = 0; s < batch; s++) b.openSequence(s, prompt.length + steps + 1);
  let t0 = performance.now();
  const chunks = Array.from({ length: batch }, (_, s) => ({ seq: s, tokens: prompt.map((t) => (t + s) % V), startPos: 0 }));
  let { logits } = b.forward({ chunks, count: false });
  const prefillS = (performance.now() - t0) / 1e3;
  t0 = performance.now();
  for (let i = 0; i < steps; i++) {
    const step = Array.from({ length: batch }, (_, s) => ({ seq: s, tokens: [greedy(logits, s * V, V)], startPos: prompt.length + i }));
    ({ logits } = b.forward({ chunks: step, count: true }));
  }
  const decodeS = (performance.now() - t0) / 1e3;
  for (let s = 0; s < batch; s++) b.closeSequence(s);
  return { prefillS, decodeS };
}

async function runEngine(batch: number, steps: number): Promise<number> {
  const engine = createEngine(newBackend());
  const reqs = Array.from({ length: batch }, (_, s) => ({
    id: `r${s}`,
    promptIds: prompt.slice(0, 16).map((t) => (t + s) % V),
    sampling: { temperature: 0, topP: 1, maxTokens: steps, ignoreEos: true },
  }));
  const t0 = performance.now();
  const out = await runToCompletion(engine, reqs);
  const s = (performance.now() - t0) / 1e3;
  let tokens = 0;
  for (const r of out.values()) tokens += r.tokens.length;
  await engine.close();
  return tokens / s;
}

const cores = availableParallelism();
const load = loadavg()[0]!;
console.log(`machine: ${cores} cores (${cpus()[0]?.model ?? 'unknown cpu'}), node ${process.version}, load average ${load.toFixed(2)}${load > cores * 0.5 ? ' (busy: figures understate a quiet machine)' : ''}`);
console.log(`model: ${model.spec.name} (${values.model}), prompt ${prompt.length} tokens, ${STEPS} decode steps, hot per layer ${placement?.hotPerLayer ?? model.spec.numExperts}`);

// Warm the JIT before measuring.
runBackend(newBackend(), 4, 32);
runBackend(newBackend(), 1, 32);

const rows: { what: string; batch: number; tokPerS: number }[] = [];
for (const batch of [1, 4]) {
  const b = newBackend();
  const r = runBackend(b, batch, STEPS);
  rows.push({ what: 'prefill (backend)', batch, tokPerS: (batch * prompt.length) / r.prefillS });
  rows.push({ what: 'decode (backend)', batch, tokPerS: (batch * STEPS) / r.decodeS });
  console.log(`batch ${batch}: prefill ${(batch * prompt.length)} tokens in ${(r.prefillS * 1e3).toFixed(1)} ms; decode ${batch * STEPS} tokens in ${(r.decodeS * 1e3).toFixed(1)} ms`);
}
for (const batch of [1, 4]) rows.push({ what: 'decode (engine)', batch, tokPerS: await runEngine(batch, STEPS) });

const LLAMA_CPP_DECODE = 1135; // llama.cpp on this checkpoint, 2-core machine, batch 1 (the lead's figure)
console.log('');
console.log('| measure            | batch | tok/s    | vs llama.cpp b1 |');
console.log('|--------------------|-------|----------|-----------------|');
for (const r of rows) {
  const ratio = r.what.startsWith('decode') ? `${(r.tokPerS / LLAMA_CPP_DECODE).toFixed(2)}x` : '';
  console.log(`| ${r.what.padEnd(18)} | ${String(r.batch).padStart(5)} | ${r.tokPerS.toFixed(1).padStart(8)} | ${ratio.padStart(15)} |`);
}

const outDir = join(packageRoot(), 'out');
mkdirSync(outDir, { recursive: true });
const file = join(outDir, 'bench-cpu-decode.json');
writeFileSync(file, `${JSON.stringify({ version: 1, bench: 'cpu-decode', date: new Date().toISOString(), cores, cpu: cpus()[0]?.model, node: process.version, loadAverage: load, model: model.spec.name, promptTokens: prompt.length, decodeSteps: STEPS, hotPerLayer: placement?.hotPerLayer ?? model.spec.numExperts, llamaCppDecodeB1: LLAMA_CPP_DECODE, results: rows }, null, 2)}\n`);
console.log(`\nwrote ${file}`);
