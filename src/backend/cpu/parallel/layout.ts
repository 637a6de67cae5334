// The shared control block between the main thread and the CPU workers: one 32-int block per worker
// (128 bytes, so two workers' flags never share a cache line), and the ops a job can run.
import type { MessagePort } from 'node:worker_threads';

/** Ints per worker block. */
export const BLOCK = 32;
/** Job sequence number: the main thread bumps it to hand the worker a job. */
export const SEQ = 0;
/** The sequence number of the last job the worker finished. */
export const DONE = 1;
/** Array-table generation the job needs (the worker first applies that many registrations). */
export const GEN = 2;
/** The op of the job (OP_*). */
export const OP = 3;
/** Set by a worker whose job threw (1) or that failed to start (2); its message waits on the error port. */
export const ERR = 4;
/** First argument of the job. */
export const ARGS = 8;

export const OP_STOP = 0;
/** args: y, w, wOff, x, rows, outDim, inDim, o0, o1 (array-table ids for y, w, x). */
export const OP_LINEAR = 1;
/** args: out, units, x, hidden, inter, u0, u1 (array-table ids for out, units, x). */
export const OP_EXPERTS = 2;

/** What a worker starts with (workerData). */
export interface WorkerInit {
  readonly control: Int32Array;
  readonly index: number;
  /** The worker module's URL (what worker-boot.mjs imports when running from sources). */
  readonly entry: string;
  /** The expert banks in CpuExpertBanks.bankList order (shared memory). */
  readonly banks: Float32Array[];
  /** Array-table registrations arrive here, read synchronously (receiveMessageOnPort). */
  readonly tablePort: MessagePort;
  /** A worker's error message goes here before it sets ERR. */
  readonly errorPort: MessagePort;
}

/** One array-table registration: table id `id` now names this shared array. */
export interface Registration {
  readonly gen: number;
  readonly id: number;
  readonly array: Float32Array | Int32Array;
}
