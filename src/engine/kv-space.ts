// Where a running request's keys and values go, as the scheduler sees it: blocks of the backend's pool, taken as a
// sequence grows, shared by common prefixes, given back to preempt.
import type { Backend, KvPool } from '../backend/backend.ts';
import { ResidencyError } from '../errors.ts';
import { KvBlocks, KvSequence, type KvBlockStats } from './kv-blocks.ts';
import type { RequestState } from './request.ts';

export interface KvSpace {
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

/** The space for a backend: its pool, prefix caching as asked. */
export function kvSpaceFor(backend: Backend, prefixCaching: boolean): KvSpace {
  return new PagedKv(backend.kvCache, prefixCaching);
}
