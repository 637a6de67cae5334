// Builds the tiered benchmark for the GPU machine (Node there, no node_modules but koffi):
// dist-tiered/bench-tiered.mjs (esbuild bundle) and dist-tiered/tiered.fatbin (nvcc, sm_90; skipped with a
// note when nvcc is absent, e.g. on CI, where only --executor cpu runs).
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';

const root = resolve(new URL('../..', import.meta.url).pathname);
const out = resolve(root, 'dist-tiered');
mkdirSync(out, { recursive: true });
// bench-tiered.mjs: the benchmark; tune-tiered.mjs: the budget pick on the CPU cost model (tune.ts);
// calibrate-tiered.mjs: the model vs a GPU run; contention-tiered.mjs: PCIe contention (contention.ts).
for (const [src, file] of [['bench/tiered/main.ts', 'bench-tiered.mjs'], ['bench/tiered/tune.ts', 'tune-tiered.mjs'], ['bench/tiered/calibrate.ts', 'calibrate-tiered.mjs'], ['bench/tiered/contention.ts', 'contention-tiered.mjs']]) {
  await build({
    absWorkingDir: root, entryPoints: [src], outfile: resolve(out, file),
    bundle: true, platform: 'node', format: 'esm', target: 'node20', external: ['koffi'], logLevel: 'warning',
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  });
}
const nvcc = process.env.NVCC ?? 'nvcc';
const r = spawnSync(nvcc, ['-fatbin', '-O3', '-std=c++17', '-gencode', 'arch=compute_90,code=sm_90', '-gencode', 'arch=compute_90,code=compute_90',
  '-o', resolve(out, 'tiered.fatbin'), resolve(root, 'bench/tiered/kernels/tiered.cu')], { stdio: 'inherit' });
if (r.error || r.status !== 0) console.log(`build: nvcc unavailable or failed (${r.error?.message ?? r.status}); tiered.fatbin not built (--executor cpu still runs)`);
console.log(`build: ${out}/bench-tiered.mjs${r.status === 0 ? ' + tiered.fatbin' : ''}`);
