// The CPU thread pool: the main thread plus `threads - 1` workers share each op out by output rows (a
// linear layer) or by expert units, through shared memory. The main thread computes the first share
// itself, then waits for the workers (a short spin, then Atomics.wait with a deadline). Rows are
// computed by the same code whichever thread runs them, so results are bit-identical to one thread.
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { ResidencyError } from '../../../errors.ts';
import type { RowCompute } from '../row-compute.ts';
import { linear } from '../linalg.ts';
import { UNIT } from '../expert-units.ts';
import { ARGS, BLOCK, DONE, ERR, GEN, OP, OP_EXPERTS, OP_LINEAR, OP_STOP, SEQ, type WorkerInit } from './layout.ts';
import { runJob, type JobScratch, type Table } from './jobs.ts';
import { workerEntry } from './entry.ts';

export interface PoolOptions {
  /** Threads in all, the main thread included (>= 2). */
  readonly threads: number;
  /** The expert banks (shared memory) in CpuExpertBanks.bankList order. */
  readonly banks: Float32Array[];
  /** Longest wait for a worker's share before giving up with an error (default 30 s). */
  readonly timeoutMs?: number;
  /** Ops with fewer multiply-adds than this run on the main thread alone (the sync would cost more). */
  readonly minSplitMacs?: number;
}

/** Polls of a worker's done flag before sleeping. */
const SPIN = 200000;

export class CpuThreadPool implements RowCompute {
  readonly threads: number;
  private readonly workers: Worker[] = [];
  private readonly tablePorts: MessagePort[] = [];
  private readonly errorPorts: MessagePort[] = [];
  private readonly ctl: Int32Array;
  private readonly ids = new Map<Float32Array | Int32Array, number>();
  private readonly table: Table = [];
  private readonly banks: Float32Array[];
  private readonly scratch: JobScratch = { act: new Float32Array(0) };
  private readonly timeoutMs: number;
  private readonly minSplitMacs: number;
  private gen = 0;
  /** Per worker: the number of the last job posted to it. */
  private readonly seqs: number[] = [];
  /** Workers given the current job. */
  private readonly busy: number[] = [];
  private disposed = false;

  constructor(opts: PoolOptions) {
    const { threads } = opts;
    if (!Number.isInteger(threads) || threads < 2 || threads > 64) {
      throw new ResidencyError('BAD_ARGUMENT', `cpu thread pool: threads ${threads}: expected an integer in [2, 64]`);
    }
    this.threads = threads;
    this.banks = opts.banks;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.minSplitMacs = opts.minSplitMacs ?? 0;
    this.ctl = new Int32Array(new SharedArrayBuffer((threads - 1) * BLOCK * 4));
    const { url, entry } = workerEntry();
    for (let i = 0; i < threads - 1; i++) {
      const table = new MessageChannel();
      const errors = new MessageChannel();
      const init: WorkerInit = { control: this.ctl, index: i, entry, banks: this.banks, tablePort: table.port2, errorPort: errors.port2 };
      const w = new Worker(url, { workerData: init, transferList: [table.port2, errors.port2], name: `residency-cpu-${i + 1}` });
      // A worker never keeps the process alive; a crashed one is reported by the next wait's deadline.
      w.unref();
      w.on('error', () => {});
      table.port1.unref();
      errors.port1.unref();
      this.workers.push(w);
      this.seqs.push(0);
      this.tablePorts.push(table.port1);
      this.errorPorts.push(errors.port1);
    }
  }

  linear(y: Float32Array, w: Float32Array, wOff: number, x: Float32Array, rows: number, outDim: number, inDim: number): void {
    const parts = Math.min(this.threads, outDim);
    if (this.disposed || parts < 2 || rows * outDim * inDim < this.minSplitMacs) {
      linear(y, w, wOff, x, rows, outDim, inDim);
      return;
    }
    const yi = this.id(y);
    const wi = this.id(w);
    const xi = this.id(x);
    // Equal contiguous row ranges; the main thread takes the first.
    const bound = (k: number): number => Math.round((k * outDim) / parts);
    for (let k = 1; k < parts; k++) this.post(k - 1, OP_LINEAR, [yi, wi, wOff, xi, rows, outDim, inDim, bound(k), bound(k + 1)]);
    runJob(OP_LINEAR, Int32Array.of(yi, wi, wOff, xi, rows, outDim, inDim, 0, bound(1)), 0, this.table, this.banks, this.scratch);
    this.waitAll();
  }

  experts(out: Float32Array, units: Int32Array, count: number, x: Float32Array, hidden: number, inter: number): void {
    const parts = Math.min(this.threads, count);
    if (this.disposed || parts < 2 || count * 3 * hidden * inter < this.minSplitMacs) {
      runJob(OP_EXPERTS, Int32Array.of(0, 0, 0, hidden, inter, 0, count), 0, this.tableWith(out, units, x), this.banks, this.scratch);
      return;
    }
    const oi = this.id(out);
    const ui = this.id(units);
    const xi = this.id(x);
    // Contiguous unit ranges holding about equal numbers of picks (a pair unit is two picks' work): a unit
    // goes to the earlier share when its midpoint falls before the share's goal.
    const weight = (u: number): number => (units[u * UNIT + 3]! >= 0 ? 2 : 1);
    let total = 0;
    for (let u = 0; u < count; u++) total += weight(u);
    const ends: number[] = [];
    let acc = 0;
    let n = 0;
    for (let k = 1; k < parts; k++) {
      const goal = (k * total) / parts;
      while (n < count && acc + weight(n) / 2 <= goal) acc += weight(n++);
      ends.push(n);
    }
    ends.push(count);
    for (let k = 1; k < parts; k++) {
      if (ends[k]! > ends[k - 1]!) this.post(k - 1, OP_EXPERTS, [oi, ui, xi, hidden, inter, ends[k - 1]!, ends[k]!]);
    }
    runJob(OP_EXPERTS, Int32Array.of(oi, ui, xi, hidden, inter, 0, ends[0]!), 0, this.table, this.banks, this.scratch);
    this.waitAll();
  }

  /** Stops and terminates the workers; later ops run on the main thread alone. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (let i = 0; i < this.workers.length; i++) {
      const b = i * BLOCK;
      this.ctl[b + OP] = OP_STOP;
      Atomics.store(this.ctl, b + SEQ, ++this.seqs[i]!);
      Atomics.notify(this.ctl, b + SEQ);
      void this.workers[i]!.terminate();
      this.tablePorts[i]!.close();
      this.errorPorts[i]!.close();
    }
  }

  /** The table id of a shared array, registering it with every worker the first time. */
  private id(a: Float32Array | Int32Array): number {
    let id = this.ids.get(a);
    if (id !== undefined) return id;
    if (!(a.buffer instanceof SharedArrayBuffer)) {
      throw new ResidencyError('INTERNAL', 'cpu thread pool: an array shared with workers must live in a SharedArrayBuffer');
    }
    id = this.table.length;
    this.table.push(a);
    this.ids.set(a, id);
    this.gen++;
    for (const p of this.tablePorts) p.postMessage({ gen: this.gen, id, array: a });
    return id;
  }

  /** A throwaway table for the main thread alone (ids 0, 1, 2), so unshared arrays work too. */
  private tableWith(out: Float32Array, units: Int32Array, x: Float32Array): Table {
    return [out, units, x];
  }

  private post(worker: number, op: number, args: number[]): void {
    const b = worker * BLOCK;
    const c = this.ctl;
    c[b + OP] = op;
    c[b + GEN] = this.gen;
    for (let i = 0; i < args.length; i++) c[b + ARGS + i] = args[i]!;
    Atomics.store(c, b + SEQ, ++this.seqs[worker]!);
    Atomics.notify(c, b + SEQ);
    this.busy.push(worker);
  }

  /** Waits for the workers given the current job; throws a worker's error, or at the deadline. */
  private waitAll(): void {
    const deadline = performance.now() + this.timeoutMs;
    for (const i of this.busy) {
      const want = this.seqs[i]!;
      const at = i * BLOCK + DONE;
      let done = Atomics.load(this.ctl, at);
      for (let s = 0; done !== want && s < SPIN; s++) done = Atomics.load(this.ctl, at);
      while (done !== want && this.ctl[i * BLOCK + ERR] === 0) {
        const left = deadline - performance.now();
        if (left <= 0) {
          this.busy.length = 0;
          this.dispose();
          throw new ResidencyError(
            'INTERNAL',
            `cpu thread pool: worker ${i + 1} did not finish its share within ${this.timeoutMs} ms (crashed or starved); threads stopped`,
          );
        }
        Atomics.wait(this.ctl, at, done, Math.min(left, 1000));
        done = Atomics.load(this.ctl, at);
      }
      if (this.ctl[i * BLOCK + ERR] !== 0) {
        const m = receiveMessageOnPort(this.errorPorts[i]!);
        this.busy.length = 0;
        this.dispose();
        throw new ResidencyError('INTERNAL', `cpu thread pool: worker ${i + 1} failed: ${m ? String(m.message) : 'unknown error'}`);
      }
    }
    this.busy.length = 0;
  }
}
