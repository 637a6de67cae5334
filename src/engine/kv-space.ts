// Where a running request's keys and values go, as the scheduler sees it: blocks of a paged backend's pool (taken as
// a sequence grows, shared by common prefixes, given back to preempt), or, for a backend without a pool (the
// transition, until the CUDA backend is paged), one reservation a sequence through openSequence / closeSequence.
import type { Backend, KvPool } from '../backend/backend.ts';
import { ResidencyError } from '../errors.ts';
import { KvBlocks, KvSequence, type KvBlockStats } from './kv-blocks.ts';
import type { RequestState } from './request.ts';

export interface KvSpace {
  /** Whether requests can be preempted to free room (paged), and the table each chunk carries. */
  readonly paged: boolean;
  /** Positions one sequence can ever hold (the pool's, or unbounded for a reservation). */
  readonly maxPositions: number;
  /**
   * A request joins the running batch with its first step's `want` tokens: the tokens found cached (its first chunk
   * starts there), or null when there is no room now (it waits). Gives the request its backend sequence id.
   */
  admit(req: RequestState, want: number): { cachedTokens: number } | null;
  /** Room for the request's positions 0..end-1; false, with nothing taken, when none is free (the caller preempts). */
  grow(req: RequestState, end: number): boolean;
  /** The request's first req.computed positions are written (full blocks join the prefix cache). */
  commit(req: RequestState): void;
  /** The request lets go of its room (ended, cancelled, preempted). */
  release(req: RequestState): void;
  /** The block table of a running request (paged), else undefined. */
  table(req: RequestState): readonly number[] | undefined;
  /** Block copies to make before the next step (copy-on-write), taken once. */
  takeCopies(): (readonly [number, number])[];
  /** Held share of the room (0..1), for usage gauges; `maxRunning` bounds a reservation's room. */
  usage(running: readonly RequestState[], maxRunning: number): number;
  /** The pool's figures (paged only). */
  stats(): (KvBlockStats & { readonly dtype: KvPool['dtype']; readonly bytesPerBlock: number }) | null;
}

/** A paged backend's pool, accounted by KvBlocks. */
export class PagedKv implements KvSpace {
  readonly paged = true;
  readonly blocks: KvBlocks;
  readonly maxPositions: number;
  private readonly seqs = new Map<RequestState, KvSequence>();
  private copies: (readonly [number, number])[] = [];
  private nextSeq = 0;

  constructor(readonly pool: KvPool, prefixCaching: boolean) {
    this.blocks = new KvBlocks(pool.numBlocks, pool.blockSize, prefixCaching);
    this.maxPositions = pool.numBlocks * pool.blockSize;
  }

  admit(req: RequestState, want: number): { cachedTokens: number } | null {
    const seq = new KvSequence();
    const a = this.blocks.admit(seq, req.tokens, want);
    if (!a) return null;
    this.seqs.set(req, seq);
    this.copies.push(...a.copies);
    req.seq = this.nextSeq++;
    return { cachedTokens: a.cachedTokens };
  }

  grow(req: RequestState, end: number): boolean {
    return this.blocks.grow(this.seqOf(req), end);
  }

  commit(req: RequestState): void {
    const seq = this.seqs.get(req);
    if (seq) this.blocks.commit(seq, req.tokens, req.computed);
  }

  release(req: RequestState): void {
    const seq = this.seqs.get(req);
    if (!seq) return;
    this.blocks.release(seq);
    this.seqs.delete(req);
    req.seq = -1;
  }

  table(req: RequestState): readonly number[] {
    return this.seqOf(req).blocks;
  }

  takeCopies(): (readonly [number, number])[] {
    const c = this.copies;
    this.copies = [];
    return c;
  }

  usage(): number {
    return this.blocks.usage;
  }

  stats() {
    return { ...this.blocks.stats(), dtype: this.pool.dtype, bytesPerBlock: this.pool.bytesPerBlock };
  }

  private seqOf(req: RequestState): KvSequence {
    const seq = this.seqs.get(req);
    if (!seq) throw new ResidencyError('INTERNAL', `kv space: request ${req.request.id} holds no blocks`);
    return seq;
  }
}

/**
 * Transition: a backend without a pool reserves each sequence's whole capacity (prompt + max tokens) when it
 * joins; nothing is shared, nothing is preempted (the running batch's size bounds the memory). Goes away once
 * every backend is paged.
 */
export class ReservedKv implements KvSpace {
  readonly paged = false;
  readonly maxPositions = Number.MAX_SAFE_INTEGER;
  private nextSeq = 0;

  constructor(private readonly backend: Backend) {
    if (!backend.openSequence || !backend.closeSequence) {
      throw new ResidencyError('BAD_ARGUMENT', `backend ${backend.name}: neither a KV pool (kvCache) nor openSequence / closeSequence`);
    }
  }

  admit(req: RequestState): { cachedTokens: number } {
    const seq = this.nextSeq++;
    this.backend.openSequence!(seq, req.capacity);
    req.seq = seq;
    return { cachedTokens: 0 };
  }

  grow(req: RequestState, end: number): boolean {
    return end <= req.capacity;
  }

  commit(): void {}

  release(req: RequestState): void {
    if (req.seq < 0) return;
    this.backend.closeSequence!(req.seq);
    req.seq = -1;
  }

  table(): undefined {
    return undefined;
  }

  takeCopies(): (readonly [number, number])[] {
    return [];
  }

  usage(running: readonly RequestState[], maxRunning: number): number {
    let held = 0;
    for (const r of running) held += r.capacity;
    return held / (maxRunning * this.backend.spec.maxPositions);
  }

  stats(): null {
    return null;
  }
}

/** The space for a backend: its pool when it has one (prefix caching as asked), else the transition's reservations. */
export function kvSpaceFor(backend: Backend, prefixCaching: boolean): KvSpace {
  return backend.kvCache ? new PagedKv(backend.kvCache, prefixCaching) : new ReservedKv(backend);
}
