// Host memory of loading a checkpoint for the CPU backend as the CLI and server do (loadModelFor 'cpu', then a
// backend that takes the experts), stage by stage: the resident set after each stage and its peak within the
// stage (Linux /proc/self/status VmRSS and VmHWM, the peak reset between stages through /proc/self/clear_refs),
// against the checkpoint's stored size. One child process per SIMD setting, so one run's freed memory does not
// count against the next. Prints a table and writes out/bench-cpu-load-memory.json.
// Run: node --expose-gc --import tsx bench/cpu/load-memory.ts DIR [--simd off|on|both] [--threads N]
// (DIR at real shapes: bench/cpu/real-geometry.ts --out DIR writes a 2-layer Qwen3-30B-A3B-geometry checkpoint)
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { openCheckpoint } from '../../src/model/checkpoint.ts';
import { createCpuBackend } from '../../src/backend/cpu/cpu-backend.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

interface Stage {
  stage: string;
  seconds: number;
  /** Resident set after the stage (after gc). */
  rss: number;
  /** The most resident at once during the stage. */
  peak: number;
}

function status(): { rss: number; hwm: number } {
  const s = readFileSync('/proc/self/status', 'utf8');
  const kib = (k: string): number => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)![1]) * 1024;
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') };
}

async function child(dir: string, simd: boolean, threads: number): Promise<{ simd: boolean; stages: Stage[] }> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  const stages: Stage[] = [];
  let t0 = performance.now();
  const mark = (stage: string): void => {
    for (let i = 0; i < 3; i++) gc();
    const s = status();
    stages.push({ stage, seconds: (performance.now() - t0) / 1000, rss: s.rss, peak: s.hwm });
    writeFileSync('/proc/self/clear_refs', '5'); // VmHWM := VmRSS
    t0 = performance.now();
  };
  mark('node + modules');
  const m = await loadModelFor(dir, 'cpu');
  mark('load (loadModelFor cpu)');
  const b = createCpuBackend(m.spec, m.weights, { simd, threads, placement: { hotPerLayer: Math.max(1, m.spec.numExperts - 4) }, takeExperts: true });
  await b.ready();
  mark('backend (banks filled)');
  b.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3], startPos: 0, blockTable: [0] }], count: false });
  mark('one prefill step');
  const simdUsed = b.simd;
  b.dispose();
  return { simd: simdUsed, stages };
}

const job = process.env.BENCH_LOAD_MEMORY_CHILD;
if (job) {
  const [dir, simd, threads] = JSON.parse(job) as [string, boolean, number];
  process.stdout.write(JSON.stringify(await child(dir, simd, threads)));
} else {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { simd: { type: 'string', default: 'both' }, threads: { type: 'string', default: '1' } } });
  const dir = positionals[0];
  if (!dir) throw new Error('usage: bench/cpu/load-memory.ts DIR (bench/cpu/real-geometry.ts --out DIR writes one at real shapes)');
  const stored = (await openCheckpoint(resolve(dir))).dataBytes;
  const simds = values.simd === 'both' ? [false, true] : [values.simd === 'on'];
  const mib = (n: number): string => (n / 2 ** 20).toFixed(0).padStart(7);
  const runs = [];
  console.log(`${basename(dir)}: ${mib(stored).trim()} MiB stored, threads ${values.threads}`);
  console.log('simd  stage                        seconds   rss (MiB)  peak (MiB)  peak - stored');
  for (const simd of simds) {
    const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: { ...process.env, BENCH_LOAD_MEMORY_CHILD: JSON.stringify([resolve(dir), simd, Number(values.threads)]) },
      encoding: 'utf8',
      maxBuffer: 1 << 20,
    });
    if (r.status !== 0) throw new Error(`${dir}: ${r.stderr}`);
    const run = JSON.parse(r.stdout) as { simd: boolean; stages: Stage[] };
    runs.push(run);
    for (const s of run.stages) {
      console.log(`${(run.simd ? 'on' : 'off').padEnd(6)}${s.stage.padEnd(28)}${s.seconds.toFixed(1).padStart(8)}    ${mib(s.rss)}     ${mib(s.peak)}       ${mib(s.peak - stored)}`);
    }
    const peak = Math.max(...run.stages.map((s) => s.peak));
    console.log(`${(run.simd ? 'on' : 'off').padEnd(6)}${'peak over the whole load'.padEnd(28)}${''.padStart(8)}    ${''.padStart(7)}     ${mib(peak)}       ${mib(peak - stored)}`);
  }
  mkdirSync(join(ROOT, 'out'), { recursive: true });
  writeFileSync(join(ROOT, 'out', 'bench-cpu-load-memory.json'), JSON.stringify({ date: new Date().toISOString(), model: basename(dir), storedBytes: stored, threads: Number(values.threads), runs }, null, 2));
}
