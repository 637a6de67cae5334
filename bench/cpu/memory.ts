// Host memory of models on the CPU backend: a float32 copy of every weight (what converting everything would
// hold) against what is held (weights as loaded: float tensors as float32, quantized ones as stored; plus the
// expert banks), and the process's growth over loading and one step, after gc, against a baseline that loaded
// the same model's config and tokenizer only. One child process per model and SIMD setting, so one model's
// garbage does not count against the next; each with bf16 weights converted to float32 (today's default) and
// kept as stored (RESIDENCY_CPU_BF16=stored); the backend taking the routed experts from the loaded weights as the CLI
// and server create it (takeExperts: the banks hold the only copy), or (--take off) copying them as tests and the API do.
// Prints a table and writes out/bench-cpu-memory.json. (bench/cpu/load-memory.ts: the peak of each load stage.)
// Run: node --expose-gc --import tsx bench/cpu/memory.ts [--simd off|auto|both] [--bf16 float32|stored|both] [--take on|off|both] [DIR ...]
// (default: the two quantized fixtures, generated into fixtures/.cache, and models/tiny-moe; bench/cpu/real-geometry.ts writes a checkpoint of
// Qwen3-30B-A3B's layer shapes)
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from '../../src/model/load.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { float32Bytes, heldBytes } from '../../src/model/weight-bytes.ts';
import { familyCheckpoint } from '../../fixtures/fixture-paths.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

interface Row {
  model: string;
  simd: boolean;
  bf16: string;
  /** The backend took the experts from the loaded weights (takeExperts). */
  take: boolean;
  float32Copy: number;
  heldWeights: number;
  banks: number;
  rssGrowth: number;
  arrayBufferGrowth: number;
  /** The child's peak resident set (loading included). */
  peakRss: number;
}

const settle = async (): Promise<NodeJS.MemoryUsage> => {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 20));
  }
  return process.memoryUsage();
};

/** One model in this process: the measured row as JSON on stdout. */
async function measure(dir: string, simd: boolean | undefined, take: boolean): Promise<Row> {
  const base = await loadModel(dir, { stream: true });
  base.tensors.close();
  const m0 = await settle();
  const m = await loadModelFor(dir, 'cpu');
  // Before a backend takes the experts from m.weights; streamed experts (StoredExpert, still in the shards) at 4 bytes a value.
  const streamed = m.weights.layers.reduce((a, l) => a + l.experts.filter((e) => e.stored).length, 0);
  const float32Copy = float32Bytes(m.weights) + streamed * 4 * 3 * m.spec.expertIntermediate * m.spec.hiddenSize;
  const b = createCpuBackend(m.spec, m.weights, { simd, threads: 1, placement: { hotPerLayer: Math.max(1, m.spec.numExperts - 4) }, takeExperts: take });
  b.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0, blockTable: [0] }], count: false });
  const m1 = await settle();
  const banks = b.banks.bytes;
  const row = { model: basename(dir), simd: b.simd, bf16: process.env.RESIDENCY_CPU_BF16 ?? 'float32', take, float32Copy, heldWeights: heldBytes(m.weights), banks, rssGrowth: m1.rss - m0.rss, arrayBufferGrowth: m1.arrayBuffers - m0.arrayBuffers, peakRss: process.resourceUsage().maxRSS * 1024 };
  b.dispose();
  return row;
}

const child = process.env.BENCH_MEMORY_CHILD;
if (child) {
  const [dir, simd, take] = JSON.parse(child) as [string, boolean | null, boolean];
  process.stdout.write(JSON.stringify(await measure(dir, simd ?? undefined, take)));
} else {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { simd: { type: 'string', default: 'both' }, bf16: { type: 'string', default: 'both' }, take: { type: 'string', default: 'on' } } });
  const dirs = positionals.length > 0 ? positionals : [familyCheckpoint('qwen3-moe-fp8-tiny'), familyCheckpoint('gpt-oss-tiny-mxfp4'), join(ROOT, 'models/tiny-moe')];
  const simds = values.simd === 'both' ? [false, null] : values.simd === 'off' ? [false] : [null];
  const bf16s = values.bf16 === 'both' ? ['float32', 'stored'] : [values.bf16!];
  const takes = values.take === 'both' ? [false, true] : values.take === 'off' ? [false] : [true];
  const rows: Row[] = [];
  for (const dir of dirs) {
    for (const bf16 of bf16s) {
      for (const simd of simds) for (const take of takes) {
        const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', fileURLToPath(import.meta.url)], {
          env: { ...process.env, BENCH_MEMORY_CHILD: JSON.stringify([resolve(dir), simd, take]), RESIDENCY_CPU_BF16: bf16 },
          encoding: 'utf8',
          maxBuffer: 1 << 20,
        });
        if (r.status !== 0) throw new Error(`${dir}: ${r.stderr}`);
        rows.push(JSON.parse(r.stdout) as Row);
      }
    }
  }
  const mib = (n: number): string => (n / 2 ** 20).toFixed(1).padStart(7);
  console.log('model                 bf16     simd  take  float32 copy  held weights   banks  held+banks  rss growth  array buffers  peak rss (MiB)');
  for (const r of rows) {
    console.log(`${r.model.padEnd(22)}${r.bf16.padEnd(9)}${(r.simd ? 'on' : 'off').padEnd(6)}${(r.take ? 'on' : 'off').padEnd(6)}${mib(r.float32Copy)}       ${mib(r.heldWeights)}   ${mib(r.banks)}  ${mib(r.heldWeights + r.banks)}     ${mib(r.rssGrowth)}     ${mib(r.arrayBufferGrowth)}   ${mib(r.peakRss)}`);
  }
  mkdirSync(join(ROOT, 'out'), { recursive: true });
  writeFileSync(join(ROOT, 'out', 'bench-cpu-memory.json'), JSON.stringify({ date: new Date().toISOString(), rows }, null, 2));
}
