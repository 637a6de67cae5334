// Starts the CPU worker from TypeScript sources: registers tsx in this worker thread, then imports the
// worker (workerData.entry). A worker that fails to load reports it through its control block, so the
// main thread's wait ends at once with the reason instead of at its deadline.
import { workerData } from 'node:worker_threads';

const BLOCK = 32; // layout.ts BLOCK
const ERR = 4; // layout.ts ERR
const DONE = 1; // layout.ts DONE
try {
  const { register } = await import('tsx/esm/api');
  register();
  await import(workerData.entry);
} catch (e) {
  workerData.errorPort.postMessage(`worker failed to start: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  const base = workerData.index * BLOCK;
  Atomics.store(workerData.control, base + ERR, 2);
  Atomics.notify(workerData.control, base + DONE);
}
