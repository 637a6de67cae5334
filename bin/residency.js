#!/usr/bin/env node
// The `residency` command: the compiled JavaScript in lib/ (`npm run build:lib`; an installed package and
// every `npm test`/`npm start` have it), so no TypeScript runs at run time. RESIDENCY_FROM_BUNDLE runs the
// GPU machine's bundle (dist/residency.mjs, `npm run build`) instead; RESIDENCY_FROM_SOURCES runs the
// sources through tsx (a dev dependency) without building.
import { existsSync } from 'node:fs';

const lib = new URL('../lib/residency.mjs', import.meta.url);
if (process.env.RESIDENCY_FROM_BUNDLE) {
  await import('../dist/residency.mjs');
} else if (!process.env.RESIDENCY_FROM_SOURCES && existsSync(lib)) {
  await import(lib.href);
} else {
  let tsx;
  try {
    tsx = await import('tsx/esm/api');
  } catch {
    console.error('residency: lib/residency.mjs is missing: run `npm run build:lib` (or install the package from npm)');
    process.exit(1);
  }
  tsx.register();
  await import('../src/cli/main.ts');
}
