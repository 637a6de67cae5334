// The shared control block between the main thread and the CPU workers, and the ops a job can run.
//
// One job at a time: the main thread writes the op, its arguments and its chunk bounds, then bumps SEQ.
// Every thread (main included) claims chunks by Atomics.add on CLAIM until none are left, so a worker
// that is asleep, descheduled or still starting costs nothing: the others take its chunks. A worker
// enters job s by moving its STATE from s-1 to -s (compareExchange) and leaves it by storing s; after its
// own claims the main thread closes the job for every worker that has not entered (s-1 -> s) and waits
// only for those that have. A worker therefore never reads a job's arguments after the job is over.
import type { MessagePort } from 'node:worker_threads';
import type { WasmMemory } from '../wasm/api.ts';
import type { QuantRowLayout } from '../expert-rows.ts';
import type { ExpertScratch } from '../wasm/experts.ts';

/** Ints per block (128 bytes: flags written by different threads never share a cache line). */
export const BLOCK = 32;

// Block 0, written by the main thread.
/** Job sequence number (1, 2, ...). */
export const SEQ = 0;
/** Array-table generation the job needs (a worker first applies that many registrations). */
export const GEN = 1;
/** The op of the job (OP_*). */
export const OP = 2;
/** Chunks in the job. */
export const CHUNKS = 3;
/** Set to 1 when the pool is disposed: workers return. */
export const STOP = 4;
/** How many times an idle worker polls SEQ between looks at the clock (set by the pool from poolTuning). */
export const WORKER_SPIN = 5;
/**
 * 1 while the main thread runs a step (CpuThreadPool.beginStep to endStep): an idle worker keeps polling SEQ instead
 * of sleeping, for at most ACTIVE_POLL_MS without a job (a step's serial stretches between jobs are microseconds; a
 * sleeping worker's wake-up costs more than a small job).
 */
export const ACTIVE = 6;
/** Longest an idle worker polls while ACTIVE before it sleeps anyway (a step stalled in long serial work). */
export const ACTIVE_POLL_MS = 2;
/**
 * How long an idle worker polls between steps before it sleeps: longer than a decode loop's gap between steps (the
 * caller's argmax and bookkeeping), so back-to-back steps never wake a sleeper (Atomics.notify waking one costs the
 * main thread a visible share of a small step; docs/results.md, "CPU threads").
 */
export const IDLE_POLL_MS = 0.2;
/** 1 when idle workers may poll (ACTIVE_POLL_MS, IDLE_POLL_MS), 0 when they sleep at once: the cores are shared (contention.ts). */
export const POLL = 7;
/** First argument of the job. */
export const ARGS = 8;

/** Block 1: the chunk claim counter (the one contended word, alone on its line). */
export const CLAIM = BLOCK;

/** Chunk c covers [bounds[c], bounds[c+1]) (rows of a linear layer, or expert units). */
export const BOUNDS = 2 * BLOCK;
/** Most chunks in one job. */
export const MAX_CHUNKS = 256;

/** Worker i's block starts here + i * BLOCK. */
export const WORKERS = BOUNDS + 10 * BLOCK;
/** In a worker block: s-1 before job s, -s inside it, s after it (or after the main thread closed it). */
export const STATE = 0;
/** Set by a worker whose job threw (1) or that failed to start (2); its message waits on the error port. */
export const ERR = 1;
/** Chunks this worker has run since it started (a statistic: tests check that workers took part). */
export const RAN = 2;

/** Ints in the control block for `workers` workers. */
export function controlSize(workers: number): number {
  return WORKERS + workers * BLOCK;
}

/**
 * args: y, w, wOff, x, rows, outDim, inDim (array-table ids for y, w, x), simd (1: y, w and x live in the
 * wasm memory: run the SIMD kernel; 2: the same over bf16 weight rows kept as stored, linear_tab_bf16), then with
 * simd the byte addresses of the output and input row tables and of w's first row (staged by the main thread,
 * wasm/stage.ts); chunks are output rows.
 */
export const OP_LINEAR = 1;
/**
 * args: out, units, unitPicks, x, hidden, inter (array-table ids for out, units, unitPicks, x), simd (1: out
 * and the banks live in the wasm memory), then with simd the byte address of x promoted to float64 (staged by
 * the main thread) and the rows' layout (wasm/experts.ts SimdRowLayout: bf16 1 or 0, then the gate, up and down
 * byte offsets); chunks are expert units.
 */
export const OP_EXPERTS = 2;

/**
 * args: out, q, units, heads, kvHeads, d (array-table ids for out, q, units), simd (1: out, q and the KV
 * cache live in the wasm memory), keys, values, table (array-table ids: the layer's cache rows and the step's block
 * tables), blockSize; chunks are (token, head) units.
 */
export const OP_ATTENTION = 3;
/**
 * args: out, units, unitPicks, x, hidden, inter (array-table ids for out, units, unitPicks, x); chunks are expert
 * units over quantized bank rows (quant-linear.ts, JS on every thread: the rows' views come from WorkerInit.quant).
 */
export const OP_QUANT_EXPERTS = 4;

/**
 * args: logits, probs, ids, weights, w, x (array-table ids), experts, hidden, topK, normalize (1/0), simd (1: logits,
 * w and x live in the wasm memory), then with simd the byte addresses of the output and input row tables and of w
 * (staged by the main thread); chunks are tokens: each computes its tokens' router logits (every output row) and
 * routes them (moe-ops.ts `routeTokens`).
 */
export const OP_ROUTE = 5;

/**
 * args: qkv, w, x, q, units (array-table ids), heads, kvHeads, d, hidden, qNorm, kNorm, cos, sin, keys, values (ids),
 * kvDtype (kv-dtype.ts code), eps (a float64 as two ints: f64Args), simd (1: qkv, w and x live in the wasm memory),
 * then with simd the byte addresses of the output and input row tables and of w; units are QKV_UNIT ints a token
 * (position, cache row); chunks are tokens: each computes its tokens' stacked q|k|v rows, then attention-ops.ts
 * `qkvPrologue` of each.
 */
export const OP_QKV = 6;
/** args: x, add, xn, weight (array-table ids), hidden, eps (a float64 as two ints: f64Args); chunks are tokens (linalg.ts `addNorm`). */
export const OP_ADD_NORM = 7;

/** Ints per q/k/v token unit: position, cache row. */
export const QKV_UNIT = 2;

const f64Bits = new Float64Array(1);
const f64Ints = new Int32Array(f64Bits.buffer);
/** A float64 job argument as two int slots. */
export function f64Args(v: number): [number, number] {
  f64Bits[0] = v;
  return [f64Ints[0]!, f64Ints[1]!];
}
/** Reads a float64 job argument from the two int slots at `at` (f64Args). */
export function getF64(c: Int32Array, at: number): number {
  f64Ints[0] = c[at]!;
  f64Ints[1] = c[at + 1]!;
  return f64Bits[0]!;
}

/** Ints per attention unit: position, q/out offset, head, offset of the token's block table. */
export const ATTN_UNIT = 4;

/** What a worker starts with (workerData). */
export interface WorkerInit {
  readonly control: Int32Array;
  readonly index: number;
  /** The worker module's URL (what worker-boot.mjs imports when running from sources). */
  readonly entry: string;
  /** The expert banks' pieces (CpuExpertBanks.pieces, shared memory), as views that cross intact. */
  readonly banks: SharedView[];
  /** Array-table registrations arrive here, read synchronously (receiveMessageOnPort). */
  readonly tablePort: MessagePort;
  /** A worker's error message goes here before it sets ERR. */
  readonly errorPort: MessagePort;
  /** The SIMD path's shared wasm memory (wasm/arena.ts), when the backend runs it. */
  readonly wasmMemory?: WasmMemory | undefined;
  /** This worker's expert-unit scratch in that memory (wasm/experts.ts). */
  readonly wasmExperts?: ExpertScratch | undefined;
  /** This worker's attention scratch in that memory: scores (maxPositions) and sums (headDim). */
  readonly wasmScores?: Float64Array | undefined;
  readonly wasmAcc?: Float64Array | undefined;
  /** Quantized banks: their rows' layout (the worker makes its own views of `banks` from it). */
  readonly quant?: { readonly layout: QuantRowLayout; readonly hidden: number; readonly inter: number } | undefined;
}

/** One array-table registration: table id `id` now names this shared array (undefined: forgotten). */
export interface Registration {
  readonly gen: number;
  readonly id: number;
  readonly array: SharedView | undefined;
}

/**
 * A shared array as it crosses to a worker. Node 20's structured clone keeps a typed-array view's byte length
 * in 32 bits (a 5 GiB bank, Mixtral-8x7B's 8 experts of a layer in float32, arrived as its first 0.7 GiB and
 * the rest read as NaN), so a view travels as its buffer, offset and length and is rebuilt on the other side.
 */
export interface SharedView {
  readonly kind: 'f32' | 'i32';
  readonly buffer: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly length: number;
}

export function toSharedView(a: Float32Array | Int32Array): SharedView {
  if (!(a.buffer instanceof SharedArrayBuffer)) throw new Error('toSharedView: the array must live in a SharedArrayBuffer');
  return { kind: a instanceof Float32Array ? 'f32' : 'i32', buffer: a.buffer, byteOffset: a.byteOffset, length: a.length };
}

export function fromSharedView(v: SharedView): Float32Array | Int32Array {
  return v.kind === 'f32' ? new Float32Array(v.buffer, v.byteOffset, v.length) : new Int32Array(v.buffer, v.byteOffset, v.length);
}
