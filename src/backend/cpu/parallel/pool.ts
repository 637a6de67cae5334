// The CPU thread pool: the main thread and `threads - 1` workers share each op out by chunks of output
// rows (a linear layer) or of expert units, through shared memory (protocol: layout.ts). Chunks are
// claimed dynamically, so a busy core or a sleeping worker only means others take more chunks. Every
// chunk is computed by the same code whichever thread claims it: results are bit-identical to one thread.
import { once } from 'node:events';
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { ResidencyError } from '../../../errors.ts';
import type { RowCompute } from '../row-compute.ts';
import { addNorm, linear } from '../linalg.ts';
import { routeTokens } from '../moe-ops.ts';
import { UNIT, computeExpertUnits } from '../expert-units.ts';
import { ACTIVE, ARGS, BLOCK, POLL, BOUNDS, CHUNKS, CLAIM, ERR, GEN, MAX_CHUNKS, OP, OP_ATTENTION, OP_EXPERTS, OP_LINEAR, OP_QUANT_EXPERTS, OP_ROUTE, OP_QKV, OP_ADD_NORM, QKV_UNIT, f64Args, ATTN_UNIT, RAN, SEQ, STATE, STOP, WORKERS, WORKER_SPIN, controlSize, toSharedView, type WorkerInit } from './layout.ts';
import { claimChunks, jobScratch, type Table } from './jobs.ts';
import { attention, qkvPrologue, type KvPages, type QkvShape } from '../attention-ops.ts';
import { workerEntry } from './entry.ts';
import { Contention } from './contention.ts';
import { attentionSimd, combineOn, simdAttention, simdQuantBanks, type QuantBanks, type SimdCompute } from '../row-compute.ts';
import { computeQuantUnits, linearQ } from '../quant-linear.ts';
import type { Bf16Matrix } from '../../../model/quant.ts';
import { inArena } from '../wasm/kernel.ts';
import { computeExpertUnitsSimd, floatRows, type SimdRowLayout } from '../wasm/experts.ts';

export interface PoolOptions {
  /** Threads in all, the main thread included (2..64). */
  readonly threads: number;
  /** The expert banks' pieces (shared memory), CpuExpertBanks.pieces. */
  readonly banks: Float32Array[];
  /** Longest wait for a worker inside a job before giving up with an error (default 30 s). */
  readonly timeoutMs?: number;
  /**
   * The wasm SIMD kernel and its memory: linear layers whose arrays all live in `arena` run through it
   * on every thread (each worker instantiates the kernel over the same shared memory).
   */
  readonly simd?: SimdCompute;
  /** Quantized banks: expert units over their rows run on every thread (each makes its own views). */
  readonly quant?: QuantBanks;
}

/** How jobs are cut (read at each op; benchmarks may change them to compare). */
export const poolTuning = {
  /**
   * Chunks per thread in a job: enough for dynamic balancing, few enough that claims stay cheap. With 4, a prefill
   * job's last chunk left the other thread waiting; 16 gained nothing over 8 (docs/results.md, "CPU threads").
   */
  chunksPerThread: 8,
  /** Ops with fewer multiply-adds run on the main thread alone (a hand-off costs a few microseconds). */
  minSplitMacs: 4096,
  /** Smallest chunk worth a claim, in multiply-adds. */
  minChunkMacs: 4096,
  /**
   * Polls of a worker's state before the main thread sleeps on it, and of the job number between an idle worker's
   * looks at the clock (it sleeps after layout.ts ACTIVE_POLL_MS within a step, IDLE_POLL_MS between steps). The main
   * thread's is short: on a loaded machine a spinning thread steals the core the others need (long spins lost there;
   * on a quiet machine the length made no difference: docs/results.md, "CPU threads").
   */
  mainSpin: 5000,
  workerSpin: 2000,
};

/** Workers of a pool that was dropped without dispose(): stopped when the pool is collected. */
const dropped = new FinalizationRegistry<{ ctl: Int32Array; workers: Worker[] }>(({ ctl, workers }) => stopWorkers(ctl, workers));

function stopWorkers(ctl: Int32Array, workers: Worker[]): void {
  Atomics.store(ctl, STOP, 1);
  Atomics.notify(ctl, SEQ);
  for (const w of workers) void w.terminate();
}

export class CpuThreadPool implements RowCompute {
  readonly threads: number;
  private readonly workers: Worker[] = [];
  private readonly tablePorts: MessagePort[] = [];
  private readonly errorPorts: MessagePort[] = [];
  private readonly ctl: Int32Array;
  private readonly ids = new Map<Float32Array | Int32Array, number>();
  private readonly table: Table = [];
  private readonly banks: Float32Array[];
  private readonly scratch = jobScratch();
  /** The attention units of the current op (grown on demand). */
  private attnUnits: Int32Array = new Int32Array(new SharedArrayBuffer(0));
  /** The q/k/v token units of the current op (grown on demand). */
  private qkvUnits: Int32Array = new Int32Array(new SharedArrayBuffer(0));
  private readonly serialAct: Float32Array[] = [new Float32Array(0)];
  private readonly timeoutMs: number;
  private readonly simd: PoolOptions['simd'];
  private readonly quant: PoolOptions['quant'];
  /** How the kernel reads the quantized banks' rows (bf16 kept as stored in its memory), or null. */
  private readonly quantSimd: SimdRowLayout | null;
  /** The float32 banks' row layout for the kernel (made on the first expert units, not each layer). */
  private floatLayout: SimdRowLayout | null = null;
  private gen = 0;
  private seq = 0;
  private readonly contention = new Contention();
  private disposed = false;
  private readonly started: Promise<unknown>[] = [];

  constructor(opts: PoolOptions) {
    const { threads } = opts;
    if (!Number.isInteger(threads) || threads < 2 || threads > 64) {
      throw new ResidencyError('BAD_ARGUMENT', `cpu thread pool: threads ${threads}: expected an integer in [2, 64]`);
    }
    this.threads = threads;
    this.banks = opts.banks;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.simd = opts.simd;
    this.scratch.simd = opts.simd?.kernel ?? null;
    this.scratch.simdExperts = opts.simd?.experts[0] ?? null;
    this.scratch.simdScores = opts.simd?.scores[0] ?? null;
    this.scratch.simdAcc = opts.simd?.accs[0] ?? null;
    this.quant = opts.quant;
    this.quantSimd = simdQuantBanks(opts.simd, opts.banks, opts.quant);
    if (opts.quant) this.scratch.quant = { rows: opts.quant.rows, rowSize: opts.quant.rowSize };
    this.ctl = new Int32Array(new SharedArrayBuffer(controlSize(threads - 1) * 4));
    const { url, entry } = workerEntry();
    for (let i = 0; i < threads - 1; i++) {
      const table = new MessageChannel();
      const errors = new MessageChannel();
      const init: WorkerInit = {
        control: this.ctl,
        index: i,
        entry,
        banks: this.banks.map(toSharedView),
        tablePort: table.port2,
        errorPort: errors.port2,
        wasmMemory: opts.simd?.arena.memory,
        wasmExperts: opts.simd?.experts[i + 1],
        wasmScores: opts.simd?.scores[i + 1],
        wasmAcc: opts.simd?.accs[i + 1],
        quant: opts.quant ? { layout: opts.quant.layout, hidden: opts.quant.hidden, inter: opts.quant.inter } : undefined,
      };
      const w = new Worker(url, { workerData: init, transferList: [table.port2, errors.port2], name: `residency-cpu-${i + 1}` });
      // A worker never keeps the process alive; its failures surface through the control block.
      w.unref();
      w.on('error', () => {});
      this.started.push(once(w, 'message'));
      table.port1.unref();
      errors.port1.unref();
      this.workers.push(w);
      this.tablePorts.push(table.port1);
      this.errorPorts.push(errors.port1);
    }
    dropped.register(this, { ctl: this.ctl, workers: this.workers }, this);
  }

  linear(y: Float32Array, w: Float32Array, wOff: number, x: Float32Array, rows: number, outDim: number, inDim: number): void {
    const simd = this.simd !== undefined && inArena(this.simd.arena, y, w, x);
    const tabs = simd ? this.simd!.stage.linear(y, x, rows, outDim, inDim) : null;
    const wAt = w.byteOffset + 4 * wOff;
    const chunks = this.rowChunks(rows, outDim, inDim);
    if (chunks === 0) {
      if (tabs) this.simd!.kernel.linearAt(tabs.yTab, wAt, tabs.xTab, rows, inDim, 0, outDim);
      else linear(y, w, wOff, x, rows, outDim, inDim);
      return;
    }
    // With SIMD the workers need only the staged addresses (every array lives in the wasm memory).
    if (tabs) this.run(OP_LINEAR, chunks, [0, 0, wOff, 0, rows, outDim, inDim, 1, tabs.yTab, tabs.xTab, wAt]);
    else this.run(OP_LINEAR, chunks, [this.id(y), this.id(w), wOff, this.id(x), rows, outDim, inDim, 0]);
  }

  addNorm(x: Float32Array, add: Float32Array, xn: Float32Array, weight: Float32Array, tokens: number, hidden: number, eps: number): void {
    // A token's add and norm is short: split only steps long enough to pay for the hand-off several times.
    const chunks = Math.min(this.threads * poolTuning.chunksPerThread, tokens, MAX_CHUNKS);
    if (this.disposed || tokens < 8 * this.threads) {
      addNorm(x, add, xn, weight, 0, tokens, hidden, eps);
      return;
    }
    const c = this.ctl;
    for (let k = 0; k <= chunks; k++) c[BOUNDS + k] = Math.round((k * tokens) / chunks);
    this.run(OP_ADD_NORM, chunks, [this.id(x), this.id(add), this.id(xn), this.id(weight), hidden, ...f64Args(eps)]);
  }

  qkv(qkv: Float32Array, w: Float32Array, x: Float32Array, tokens: number, hidden: number, q: Float32Array, keys: Float32Array, values: Float32Array, pages: KvPages, pos: Int32Array, shape: QkvShape): void {
    // As route: split by tokens when each thread gets two or more, else the linear split by rows and the prologue here.
    const W = (shape.heads + 2 * shape.kvHeads) * shape.d;
    const chunks = Math.min(this.threads * poolTuning.chunksPerThread, tokens, MAX_CHUNKS);
    if (this.disposed || tokens < 2 * this.threads || tokens * W * hidden < poolTuning.minSplitMacs) {
      this.linear(qkv, w, 0, x, tokens, W, hidden);
      for (let i = 0; i < tokens; i++) qkvPrologue(qkv, q, keys, values, i, pos[i]!, pages.rowOf[i]!, shape);
      return;
    }
    const units = (this.qkvUnits = this.unitsFor(this.qkvUnits, tokens, QKV_UNIT));
    for (let i = 0; i < tokens; i++) {
      units[i * QKV_UNIT] = pos[i]!;
      units[i * QKV_UNIT + 1] = pages.rowOf[i]!;
    }
    const simd = this.simd !== undefined && inArena(this.simd.arena, qkv, w, x);
    const tabs = simd ? this.simd!.stage.linear(qkv, x, tokens, W, hidden) : null;
    const c = this.ctl;
    for (let k = 0; k <= chunks; k++) c[BOUNDS + k] = Math.round((k * tokens) / chunks);
    const s = shape;
    const ends = tabs ? [1, tabs.yTab, tabs.xTab, w.byteOffset] : [0];
    this.run(OP_QKV, chunks, [this.id(qkv), this.id(w), this.id(x), this.id(q), this.id(units), s.heads, s.kvHeads, s.d, hidden, this.id(s.qNorm), this.id(s.kNorm), this.id(s.cos), this.id(s.sin),
      this.id(keys), this.id(values), s.kvDtype, ...f64Args(s.eps), ...ends]);
  }

  route(logits: Float32Array, probs: Float32Array, ids: Int32Array, weights: Float32Array, w: Float32Array, x: Float32Array, tokens: number, experts: number, hidden: number, topK: number, normalize: boolean): void {
    // Split by tokens when each thread gets two or more (a token's softmax and top-k follow its logits on the thread
    // that computed them); fewer tokens split the logits by rows and route on the calling thread.
    const chunks = Math.min(this.threads * poolTuning.chunksPerThread, tokens, MAX_CHUNKS);
    if (this.disposed || tokens < 2 * this.threads || tokens * experts * hidden < poolTuning.minSplitMacs) {
      this.linear(logits, w, 0, x, tokens, experts, hidden);
      routeTokens(logits, probs, ids, weights, 0, tokens, experts, topK, normalize);
      return;
    }
    const simd = this.simd !== undefined && inArena(this.simd.arena, logits, w, x);
    const tabs = simd ? this.simd!.stage.linear(logits, x, tokens, experts, hidden) : null;
    const c = this.ctl;
    for (let k = 0; k <= chunks; k++) c[BOUNDS + k] = Math.round((k * tokens) / chunks);
    const ends = tabs ? [1, tabs.yTab, tabs.xTab, w.byteOffset] : [0];
    this.run(OP_ROUTE, chunks, [this.id(logits), this.id(probs), this.id(ids), this.id(weights), this.id(w), this.id(x), experts, hidden, topK, normalize ? 1 : 0, ...ends]);
  }

  experts(out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, inter: number): void {
    if (this.simd !== undefined && inArena(this.simd.arena, out, x, x)) {
      if (this.floatLayout?.up !== 4 * inter * hidden) this.floatLayout = floatRows(hidden, inter);
      return this.simdUnits(out, units, unitPicks, count, x, tokens, hidden, inter, this.floatLayout);
    }
    const chunks = this.unitChunks(units, count, hidden, inter);
    if (chunks === 0) {
      if (this.serialAct[0]!.length < 2 * inter) this.serialAct[0] = new Float32Array(2 * inter);
      computeExpertUnits(out, units, unitPicks, 0, count, this.banks, x, hidden, inter, this.serialAct[0]!);
      return;
    }
    this.run(OP_EXPERTS, chunks, [this.id(out), this.id(units), this.id(unitPicks), this.id(x), hidden, inter, 0]);
  }

  linearBf16(y: Float32Array, w: Bf16Matrix, x: Float32Array, rows: number): void {
    const { rows: outDim, cols: inDim } = w;
    if (!this.simd || !inArena(this.simd.arena, y, w.data, x)) return linearQ(y, w, x, rows);
    const { yTab, xTab } = this.simd!.stage.linear(y, x, rows, outDim, inDim);
    const chunks = this.rowChunks(rows, outDim, inDim);
    if (chunks === 0) return this.simd!.kernel.linearBf16At(yTab, w.data.byteOffset, xTab, rows, inDim, 0, outDim);
    this.run(OP_LINEAR, chunks, [0, 0, 0, 0, rows, outDim, inDim, 2, yTab, xTab, w.data.byteOffset]);
  }

  /**
   * A linear layer's split by output rows: its chunk count with the bounds written, or 0 when it is too small to share
   * out (it runs on the calling thread).
   */
  private rowChunks(rows: number, outDim: number, inDim: number): number {
    const t = poolTuning;
    const macs = rows * outDim * inDim;
    const chunks = Math.min(this.threads * t.chunksPerThread, outDim, Math.ceil(macs / t.minChunkMacs), MAX_CHUNKS);
    if (this.disposed || chunks < 2 || macs < t.minSplitMacs) return 0;
    for (let k = 0; k <= chunks; k++) this.ctl[BOUNDS + k] = Math.round((k * outDim) / chunks);
    return chunks;
  }

  /**
   * Expert units through the kernel over rows laid out as `layout` (float32, or bf16 kept as stored): x promoted once,
   * then on the calling thread when small, else shared out by units.
   */
  private simdUnits(out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, inter: number, layout: SimdRowLayout): void {
    const x64 = this.simd!.stage.promote(x, tokens * hidden);
    const chunks = this.unitChunks(units, count, hidden, inter);
    if (chunks === 0) return computeExpertUnitsSimd(this.simd!.kernel, this.simd!.experts[0]!, out, units, unitPicks, 0, count, this.banks, x64, hidden, inter, layout);
    const L = layout;
    this.run(OP_EXPERTS, chunks, [this.id(out), this.id(units), this.id(unitPicks), this.id(x), hidden, inter, 1, x64, L.bf16 ? 1 : 0, L.gate, L.up, L.down]);
  }

  /** Expert units' split (a unit is its picks' work: chunks balance picks), bounds written; 0: the calling thread. */
  private unitChunks(units: Int32Array, count: number, hidden: number, inter: number): number {
    const chunks = Math.min(this.threads * poolTuning.chunksPerThread, count, MAX_CHUNKS);
    if (this.disposed || chunks < 2 || pickCount(units, count) * 3 * hidden * inter < poolTuning.minSplitMacs) return 0;
    writeBounds(this.ctl, count, chunks, (u) => units[u * UNIT + 3]!);
    return chunks;
  }

  combine(out: Float32Array, w: Float32Array, pickOut: Float32Array, tokens: number, topK: number, hidden: number): void {
    combineOn(this.simd, out, w, pickOut, tokens, topK, hidden);
  }

  quantExperts(out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, inter: number): void {
    const q = this.quant;
    if (!q) throw new ResidencyError('INTERNAL', 'cpu thread pool: quantized expert units without quantized banks');
    // bf16 rows kept as stored, in the kernel's memory: the float32 experts' path over their layout.
    if (this.quantSimd && inArena(this.simd!.arena, out, x, x)) return this.simdUnits(out, units, unitPicks, count, x, tokens, hidden, inter, this.quantSimd);
    const chunks = this.unitChunks(units, count, hidden, inter);
    if (chunks === 0) {
      if (this.serialAct[0]!.length < 2 * inter) this.serialAct[0] = new Float32Array(2 * inter);
      computeQuantUnits(out, units, unitPicks, 0, count, q.rows, q.rowSize, x, hidden, inter, this.serialAct[0]!);
      return;
    }
    this.run(OP_QUANT_EXPERTS, chunks, [this.id(out), this.id(units), this.id(unitPicks), this.id(x), hidden, inter]);
  }

  /**
   * Resolves when every worker has started (ops never wait for this: until then the main thread takes
   * every chunk; benchmarks and tests await it so workers take part from the first step).
   */
  async ready(): Promise<void> {
    // Hold the process open while waiting: the workers alone would not.
    for (const w of this.workers) w.ref();
    try {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(this.started),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new ResidencyError('INTERNAL', `cpu thread pool: the workers did not start within ${this.timeoutMs} ms`)), this.timeoutMs);
        }),
        ...this.workers.map(async (w) => {
          const [code] = (await once(w, 'exit')) as [number];
          throw new ResidencyError('INTERNAL', `cpu thread pool: a worker exited with code ${code} before it started`);
        }),
      ]).finally(() => clearTimeout(timer));
      for (let i = 0; i < this.workers.length; i++) {
        if (this.ctl[WORKERS + i * BLOCK + ERR] !== 0) {
          const m = receiveMessageOnPort(this.errorPorts[i]!);
          throw new ResidencyError('INTERNAL', `cpu thread pool: worker ${i + 1} failed: ${m ? String(m.message) : 'unknown error'}`);
        }
      }
    } finally {
      for (const w of this.workers) w.unref();
    }
  }

  /** Chunks the workers have run (the main thread's are not counted). */
  workerChunks(): number {
    let n = 0;
    for (let i = 0; i < this.workers.length; i++) n += this.ctl[WORKERS + i * BLOCK + RAN]!;
    return n;
  }

  attention(
    out: Float32Array,
    q: Float32Array,
    tokens: number,
    keys: Float32Array,
    values: Float32Array,
    pages: KvPages,
    pos: Int32Array,
    heads: number,
    kvHeads: number,
    d: number,
    scores: Float64Array,
    acc: Float64Array,
  ): void {
    const count = tokens * heads;
    // A unit's cost grows with its position: chunks balance positions, not units.
    let total = 0;
    for (let i = 0; i < tokens; i++) total += (pos[i]! + 1) * heads;
    const chunks = Math.min(this.threads * poolTuning.chunksPerThread, count, MAX_CHUNKS);
    const simd = simdAttention(this.simd, out, q, keys, values);
    if (this.disposed || chunks < 2 || total * 2 * d < poolTuning.minSplitMacs) {
      if (simd) {
        attentionSimd(this.simd!, out, q, tokens, keys, values, pages, pos, heads, kvHeads, d);
        return;
      }
      const w = heads * d;
      for (let i = 0; i < tokens; i++) attention(out, i * w, q, i * w, keys, values, pages.table, pages.tableOf[i]!, pages.blockSize, pos[i]!, heads, kvHeads, d, scores, acc);
      return;
    }
    const units = (this.attnUnits = this.unitsFor(this.attnUnits, count, ATTN_UNIT));
    for (let i = 0; i < tokens; i++) {
      for (let h = 0; h < heads; h++) {
        const u = (i * heads + h) * ATTN_UNIT;
        units[u] = pos[i]!;
        units[u + 1] = i * heads * d;
        units[u + 2] = h;
        units[u + 3] = pages.tableOf[i]!;
      }
    }
    writeBounds(this.ctl, count, chunks, (u) => units[u * ATTN_UNIT]! + 1);
    this.run(OP_ATTENTION, chunks, [this.id(out), this.id(q), this.id(units), heads, kvHeads, d, simd ? 1 : 0, this.id(keys), this.id(values), this.id(pages.table), pages.blockSize]);
  }

  /** `units` if it holds `count` units of `ints` each, else a shared one at least twice its size (the old one forgotten). */
  private unitsFor(units: Int32Array, count: number, ints: number): Int32Array {
    if (units.length >= count * ints) return units;
    this.forget(units);
    return new Int32Array(new SharedArrayBuffer(4 * ints * Math.max(count, 2 * (units.length / ints))));
  }

  /**
   * A step begins: idle workers poll for its jobs instead of sleeping (layout.ts ACTIVE; unless the cores are shared
   * with other work: POLL), and a sleeping one is woken now, while the main thread embeds the step's tokens, rather
   * than by the step's first job.
   */
  beginStep(): void {
    if (this.disposed) return;
    Atomics.store(this.ctl, POLL, this.contention.check() ? 0 : 1);
    Atomics.store(this.ctl, ACTIVE, 1);
    Atomics.notify(this.ctl, SEQ);
  }

  /** The step is over: idle workers go back to polling briefly, then sleeping. */
  endStep(): void {
    Atomics.store(this.ctl, ACTIVE, 0);
  }

  /** Drops an array from every worker's table (an array about to be freed, e.g. a closed KV cache). */
  forget(a: Float32Array | Int32Array): void {
    const id = this.ids.get(a);
    if (id === undefined) return;
    this.ids.delete(a);
    this.table[id] = undefined;
    this.gen++;
    for (const p of this.tablePorts) p.postMessage({ gen: this.gen, id, array: undefined });
  }

  /** Stops and terminates the workers; later ops run on the main thread alone. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    dropped.unregister(this);
    stopWorkers(this.ctl, this.workers);
    for (let i = 0; i < this.workers.length; i++) {
      this.tablePorts[i]!.close();
      this.errorPorts[i]!.close();
    }
  }

  /** Publishes the job (bounds already written), claims chunks with the workers, and ends it. */
  private run(op: number, chunks: number, args: number[]): void {
    const c = this.ctl;
    c[OP] = op;
    c[CHUNKS] = chunks;
    c[GEN] = this.gen;
    c[WORKER_SPIN] = poolTuning.workerSpin;
    for (let i = 0; i < args.length; i++) c[ARGS + i] = args[i]!;
    Atomics.store(c, CLAIM, 0);
    const s = ++this.seq;
    Atomics.store(c, SEQ, s);
    Atomics.notify(c, SEQ);
    try {
      claimChunks(c, this.table, this.banks, this.scratch);
    } finally {
      // Even when the main thread's share throws, workers inside the job are waited for, so none is
      // still writing when the caller sees the error.
      this.end(s);
    }
  }

  /** Closes job `s` for workers that never entered it and waits for those inside it; then reports failures. */
  private end(s: number): void {
    const c = this.ctl;
    let deadline = 0;
    for (let i = 0; i < this.workers.length; i++) {
      const at = WORKERS + i * BLOCK + STATE;
      if (Atomics.compareExchange(c, at, s - 1, s) === s - 1) continue;
      let st = Atomics.load(c, at);
      for (let k = 0, n = poolTuning.mainSpin; st !== s && k < n; k++) st = Atomics.load(c, at);
      while (st !== s) {
        if (deadline === 0) deadline = performance.now() + this.timeoutMs;
        const left = deadline - performance.now();
        if (left <= 0) {
          this.dispose();
          throw new ResidencyError(
            'INTERNAL',
            `cpu thread pool: worker ${i + 1} did not finish its chunks within ${this.timeoutMs} ms (crashed or starved); threads stopped`,
          );
        }
        Atomics.wait(c, at, st, Math.min(left, 1000));
        st = Atomics.load(c, at);
      }
    }
    for (let i = 0; i < this.workers.length; i++) {
      if (c[WORKERS + i * BLOCK + ERR] !== 0) {
        const m = receiveMessageOnPort(this.errorPorts[i]!);
        this.dispose();
        throw new ResidencyError('INTERNAL', `cpu thread pool: worker ${i + 1} failed: ${m ? String(m.message) : 'unknown error'}`);
      }
    }
  }

  /** The table id of a shared array, registering it with every worker the first time. */
  private id(a: Float32Array | Int32Array): number {
    let id = this.ids.get(a);
    if (id !== undefined) return id;
    if (!(a.buffer instanceof SharedArrayBuffer)) {
      throw new ResidencyError('INTERNAL', 'cpu thread pool: an array shared with workers must live in a SharedArrayBuffer');
    }
    id = this.table.indexOf(undefined);
    if (id < 0) id = this.table.length;
    this.table[id] = a;
    this.ids.set(a, id);
    this.gen++;
    for (const p of this.tablePorts) p.postMessage({ gen: this.gen, id, array: toSharedView(a) });
    return id;
  }
}

/** The picks of units [0, count). */
function pickCount(units: Int32Array, count: number): number {
  let n = 0;
  for (let u = 0; u < count; u++) n += units[u * UNIT + 3]!;
  return n;
}

/**
 * Chunk bounds over `count` units of cost weight(u): contiguous ranges of about equal cost, a unit going
 * to the earlier chunk when its midpoint falls before that chunk's share.
 */
function writeBounds(c: Int32Array, count: number, chunks: number, weight: (u: number) => number): void {
  let total = 0;
  for (let u = 0; u < count; u++) total += weight(u);
  c[BOUNDS] = 0;
  let acc = 0;
  let n = 0;
  for (let k = 1; k < chunks; k++) {
    const goal = (k * total) / chunks;
    while (n < count && acc + weight(n) / 2 <= goal) acc += weight(n++);
    c[BOUNDS + k] = n;
  }
  c[BOUNDS + chunks] = count;
}
