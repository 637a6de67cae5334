// Starts a server worker (the tokenizer's, the body checker's) from TypeScript sources: registers tsx in this
// worker thread, then imports the worker (workerData.entry); Node 20 workers do not reliably take tsx from --import.
import { parentPort, workerData } from 'node:worker_threads';

try {
  const { register } = await import('tsx/esm/api');
  register();
  await import(workerData.entry);
} catch (e) {
  parentPort.postMessage({ failed: e instanceof Error ? (e.stack ?? e.message) : String(e) });
}
