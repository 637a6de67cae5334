#!/usr/bin/env node
// The `residency` command. A bundled build (dist/residency.mjs, made by `npm run build`) is used when
// present, e.g. on the GPU machine; otherwise the TypeScript sources run through tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const bundled = fileURLToPath(new URL('../dist/residency.mjs', import.meta.url));
if (existsSync(bundled) && !process.env.RESIDENCY_FROM_SOURCE) {
  await import(bundled);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
}
