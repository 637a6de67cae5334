// Large request bodies checked in a worker thread (body-worker.ts), one at a time in arrival order. If the
// worker cannot start (a bundle without its file) or dies, bodies are checked inline, as small ones are.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { checkBody, type BodyCheck, type BodySchema } from './body-check.ts';
import type { BodyCheckReply } from './body-worker.ts';

/** The bundle's worker file name (scripts/build.mjs and build-lib.mjs: src/server/body-worker.ts -> body-worker.mjs). */
const BUNDLED_WORKER = 'body-worker.mjs';

export class OffThreadBodies {
  private worker: Worker | null = null;
  private broken = false;
  private next = 0;
  private readonly pending = new Map<number, { resolve: (r: BodyCheck) => void; bytes: Uint8Array; schema: BodySchema }>();

  /** Checks `bytes` in the worker (a copy of them: kept here too, for the inline fallback). */
  check(bytes: Uint8Array, schema: BodySchema): Promise<BodyCheck> {
    const worker = this.start();
    if (!worker) return Promise.resolve(checkBody(bytes, schema));
    const id = this.next++;
    return new Promise((resolve) => {
      if (this.pending.size === 0) worker.ref(); // held while checks are owed, so an answer is never lost
      this.pending.set(id, { resolve, bytes, schema });
      worker.postMessage({ id, bytes, schema });
    });
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (w) await w.terminate();
  }

  private start(): Worker | null {
    if (this.worker || this.broken) return this.worker;
    const here = import.meta.url;
    const fromSources = here.endsWith('.ts');
    // From sources, the tokenizer worker's boot file registers tsx in the thread and imports the entry.
    const url = fromSources ? new URL('./tokenizer-worker-boot.mjs', here) : new URL(`./${BUNDLED_WORKER}`, here);
    if (!existsSync(fileURLToPath(url))) return this.fail(`${fileURLToPath(url)} is missing`);
    const entry = fromSources ? new URL('./body-worker.ts', here).href : url.href;
    const w = new Worker(url, { workerData: { entry }, name: 'residency-body-check' });
    w.on('message', (m: BodyCheckReply | { ready: true } | { failed: string }) => {
      if ('failed' in m) return void this.fail(m.failed);
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (this.pending.size === 0) w.unref();
      p.resolve(m.result);
    });
    w.on('error', (err) => this.fail(err.message));
    w.on('exit', (code) => { if (this.worker === w) this.fail(`exited with code ${code}`); });
    // Idle, it never keeps the process alive (after the listeners: adding a 'message' listener refs a worker again).
    w.unref();
    this.worker = w;
    return w;
  }

  /** Gives up on the worker: what it still owed is checked inline. */
  private fail(why: string): null {
    if (!this.broken) process.emitWarning(`request body worker unavailable, large bodies are checked on the main thread: ${why}`);
    this.broken = true;
    const w = this.worker;
    this.worker = null;
    void w?.terminate();
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.resolve(checkBody(p.bytes, p.schema));
    }
    return null;
  }
}
