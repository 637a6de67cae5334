// Drives a backend sequence by sequence without the engine (tests, tools, benchmarks, reference loops): open a
// sequence with a capacity, feed it chunks, close it. Its blocks come from a free list kept here (each sequence gets
// the blocks its capacity needs, lowest ids first).
import { ResidencyError } from '../errors.ts';
import type { Backend, PendingStep, SequenceChunk, StepInput, StepOutput } from './backend.ts';

/** A chunk as the caller writes it: the block table is filled in here. */
export type PlainChunk = Omit<SequenceChunk, 'blockTable'>;

/** A step whose chunks are plain (their tables filled in from the sequences opened here). */
export type PlainStep = Omit<StepInput, 'chunks'> & { readonly chunks: readonly PlainChunk[] };

export class DirectSequences {
  private readonly free: number[] = [];
  private readonly tables = new Map<number, number[]>();

  constructor(readonly backend: Backend) {
    for (let b = backend.kvCache.numBlocks - 1; b >= 0; b--) this.free.push(b);
  }

  /** Room for `capacity` positions of sequence `seq` (refused naming what is short). */
  open(seq: number, capacity: number): void {
    const pool = this.backend.kvCache;
    if (this.tables.has(seq)) throw new ResidencyError('BAD_ARGUMENT', `seq ${seq} is already open: close it first`);
    if (!Number.isInteger(capacity) || capacity < 1) throw new ResidencyError('BAD_ARGUMENT', `capacity ${capacity} for seq ${seq}: expected an integer >= 1`);
    const need = Math.ceil(capacity / pool.blockSize);
    if (need > this.free.length) {
      throw new ResidencyError('NOT_AVAILABLE', `seq ${seq}: ${capacity} positions need ${need} KV blocks of ${pool.blockSize}; ${this.free.length} of ${pool.numBlocks} are free`);
    }
    this.tables.set(seq, this.free.splice(this.free.length - need, need).reverse());
  }

  close(seq: number): void {
    const t = this.tables.get(seq);
    if (!t) return;
    this.tables.delete(seq);
    for (let i = t.length - 1; i >= 0; i--) this.free.push(t[i]!);
  }

  /** The blocks of an open sequence, else undefined. */
  table(seq: number): readonly number[] | undefined {
    return this.tables.get(seq);
  }

  /** The chunk with its sequence's block table (a sequence not opened here goes as given: the backend refuses it). */
  chunk(c: PlainChunk): SequenceChunk {
    const t = this.tables.get(c.seq);
    return t ? { ...c, blockTable: t } : c;
  }

  input(step: PlainStep): StepInput {
    return { ...step, chunks: step.chunks.map((c) => this.chunk(c)) };
  }

  forward(step: PlainStep): StepOutput {
    return this.backend.forward(this.input(step));
  }

  /** Backend.submit with the tables filled in (the backend must run ahead). */
  submit(step: PlainStep): PendingStep {
    if (!this.backend.submit) throw new ResidencyError('BAD_ARGUMENT', `backend ${this.backend.name} does not run ahead (no submit)`);
    return this.backend.submit(this.input(step));
  }

  /** Closes every sequence still open. */
  closeAll(): void {
    for (const seq of [...this.tables.keys()]) this.close(seq);
  }
}

/** A backend seen as one opened and closed by sequence (bySequence). */
export type SequenceBackend<B extends Backend> = B & { openSequence(seq: number, capacity: number): void; closeSequence(seq: number): void };

/**
 * The backend seen as one opened and closed by sequence, its block tables filled in here (DirectSequences): for
 * hand-driven code that steps backends side by side with the same chunks. Every other member is the backend's own (methods bound to it, fields read and written
 * on it), so the view never holds state of its own beside the backend's.
 */
export function bySequence<B extends Backend>(backend: B): SequenceBackend<B> {
  const seqs = new DirectSequences(backend);
  const own: Record<string, unknown> = {
    openSequence: (seq: number, capacity: number) => seqs.open(seq, capacity),
    closeSequence: (seq: number) => seqs.close(seq),
    forward: (input: StepInput) => seqs.forward(input),
    ...(backend.submit ? { submit: (input: StepInput) => seqs.submit(input) } : {}),
  };
  return new Proxy(backend, {
    get(target, key) {
      if (typeof key === 'string' && key in own) return own[key];
      const v: unknown = Reflect.get(target, key, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
    set: (target, key, value) => Reflect.set(target, key, value, target),
  }) as SequenceBackend<B>;
}
