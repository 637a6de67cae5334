// `npm run build`: bundles the CLI (dist/residency.mjs, which bin/residency.js prefers), the GPU tests
// (dist/gpu-tests.mjs), the GPU benchmark (dist/bench-gpu.mjs) and the fixture generator
// (dist/make-fixtures.mjs) with esbuild, for machines that have Node.js but no node_modules (the GPU machine
// carries node_modules/koffi only), then the kernels when nvcc is present. koffi stays external: it loads a
// native module.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';

const root = resolve(new URL('..', import.meta.url).pathname);
const entries = [
  ['src/cli/main.ts', 'dist/residency.mjs'],
  ['src/backend/cpu/parallel/worker.ts', 'dist/cpu-worker.mjs'],
  ['src/server/tokenizer-worker.ts', 'dist/tokenizer-worker.mjs'],
  ['src/server/body-worker.ts', 'dist/body-worker.mjs'],
  ['test/gpu/run.ts', 'dist/gpu-tests.mjs'],
  ['bench/gpu/decode.ts', 'dist/bench-gpu.mjs'],
  ['bench/gpu/profile.ts', 'dist/profile-gpu.mjs'],
  ['bench/gpu/real-size.ts', 'dist/bench-real.mjs'],
  ['bench/gpu/cold-read.ts', 'dist/bench-cold-read.mjs'],
  ['bench/tiered/real.ts', 'dist/bench-tiered.mjs'],
  ['bench/tiered/host-lane.ts', 'dist/bench-host-lane.mjs'],
  ['bench/cpu/decode.ts', 'dist/bench-cpu.mjs'],
  ['fixtures/make/cli.ts', 'dist/make-fixtures.mjs'],
];
for (const [src, out] of entries) {
  if (!existsSync(resolve(root, src))) { console.log(`build: ${src} not present, skipped`); continue; }
  await build({
    absWorkingDir: root,
    entryPoints: [src],
    outfile: out,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['koffi'],
    sourcemap: 'linked',
    logLevel: 'warning',
    // Bundled CommonJS dependencies may call require().
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  });
  console.log(`build: ${src} -> ${out}`);
}
const r = spawnSync(process.execPath, [resolve(root, 'scripts/build-kernels.mjs'), '--optional'], { stdio: 'inherit' });
process.exit(r.status ?? 1);
