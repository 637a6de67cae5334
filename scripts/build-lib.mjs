// `npm run build:lib`: the package's JavaScript, so no TypeScript runs at run time. esbuild bundles the
// CLI, the API (src/index.ts) and the worker entries into lib/ with shared chunks (dependencies stay
// external: npm installs them), copies the dashboard's static files beside them, and tsc writes the API's
// declarations to lib/types/ (skipped with --js-only: npm start and generate need only the JavaScript).
// dist/ is scripts/build.mjs's (the GPU machine's bundle): untouched here.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(new URL('..', import.meta.url).pathname);
const lib = join(root, 'lib');
const t0 = performance.now();
const jsOnly = process.argv.includes('--js-only');
// Old chunks go (their names are hashes); declarations stay unless rebuilt below.
for (const name of existsSync(lib) ? readdirSync(lib) : []) if (name !== 'types') rmSync(join(lib, name), { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: {
    residency: 'src/cli/main.ts',
    index: 'src/index.ts',
    'cpu-worker': 'src/backend/cpu/parallel/worker.ts',
    'tokenizer-worker': 'src/server/tokenizer-worker.ts',
    'body-worker': 'src/server/body-worker.ts',
  },
  outdir: lib,
  outExtension: { '.js': '.mjs' },
  bundle: true,
  splitting: true,
  packages: 'external',
  platform: 'node',
  format: 'esm',
  target: 'node20',
  logLevel: 'warning',
});
cpSync(join(root, 'src/server/dashboard'), join(lib, 'dashboard'), { recursive: true });
if (jsOnly) {
  console.log(`build:lib: lib/ (esbuild, no declarations) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  process.exit(0);
}
rmSync(join(lib, 'types'), { recursive: true, force: true });

// Declarations of the API only (src/index.ts and what it reaches). Specifiers keep their '.ts' in tsc's
// output; consumers resolve './x.js' to './x.d.ts', so they are rewritten.
const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.lib.json')], { encoding: 'utf8' });
const types = join(lib, 'types');
if (!existsSync(join(types, 'index.d.ts'))) {
  console.error(`build:lib: tsc wrote no declarations\n${tsc.stdout}${tsc.stderr}`);
  process.exit(1);
}
let files = 0;
(function rewrite(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) { rewrite(p); continue; }
    if (!name.endsWith('.d.ts')) continue;
    writeFileSync(p, readFileSync(p, 'utf8').replace(/((?:from|import)\s*\(?\s*['"])(\.{1,2}\/[^'"]+)\.ts(['"])/g, '$1$2.js$3'));
    files++;
  }
})(types);
console.log(`build:lib: lib/ (esbuild + ${files} declaration files) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
