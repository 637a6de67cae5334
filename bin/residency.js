#!/usr/bin/env node
// The `residency` command. Runs the TypeScript sources through tsx when it is installed (every normal
// install); where it is not (the GPU machine, which carries only a bundle), runs dist/residency.mjs,
// made by `npm run build`. A stale bundle therefore never shadows the sources on a dev machine.
let tsx = null;
if (!process.env.RESIDENCY_FROM_BUNDLE) {
  try {
    tsx = await import('tsx/esm/api');
  } catch {
    tsx = null;
  }
}
if (tsx) {
  tsx.register();
  await import('../src/cli/main.ts');
} else {
  await import('../dist/residency.mjs');
}
