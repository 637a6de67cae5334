// Starts the CPU worker from TypeScript sources: registers tsx in this worker thread, then imports the
// worker (workerData.entry). A worker that fails to load reports it through its control block; the main
// thread checks the flag after each job and throws the reason.
import { workerData } from 'node:worker_threads';

const BLOCK = 32; // layout.ts BLOCK
const WORKERS = 2 * BLOCK + 10 * BLOCK; // layout.ts WORKERS
const ERR = 1; // layout.ts ERR (in the worker's block)
try {
  const { register } = await import('tsx/esm/api');
  register();
  await import(workerData.entry);
} catch (e) {
  workerData.errorPort.postMessage(`worker failed to start: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  Atomics.store(workerData.control, WORKERS + workerData.index * BLOCK + ERR, 2);
}
