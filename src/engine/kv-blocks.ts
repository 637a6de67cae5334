// The engine's accounting of a paged backend's KV pool (vLLM v1's BlockPool and KVCacheManager in one): which
// blocks are free, each sequence's block table, and prefix caching. A full block is known by a hash of its tokens
// chained to the hash of the block before it, so equal hashes mean equal prefixes; a cached block whose sequences
// have all ended stays in the pool, reusable, until a new block is needed and it is the least recently freed.
import { createHash, randomBytes } from 'node:crypto';
import { ResidencyError } from '../errors.ts';

/** One sequence's blocks: its table, the hashes of its full blocks of tokens, how many of them are in the cache. */
export class KvSequence {
  /** Block ids, entry i holding positions [i x blockSize, (i+1) x blockSize): the chunk's blockTable. */
  readonly blocks: number[] = [];
  /** Chained hashes of the sequence's full blocks of tokens so far (prefix caching). */
  readonly hashes: string[] = [];
  /** The first `cached` blocks are known to the prefix cache (written whole, or found there). */
  cached = 0;
}

/** What admitting a sequence found and took. */
export interface Admission {
  /** Leading tokens whose keys and values are already in the sequence's blocks: its first chunk starts there. */
  readonly cachedTokens: number;
  /** Block copies (src, dst) to make before the sequence's first step (copy-on-write of a shared last block). */
  readonly copies: readonly (readonly [number, number])[];
}

export interface KvBlockStats {
  readonly numBlocks: number;
  readonly blockSize: number;
  /** Blocks no sequence holds (cached ones among them: they are taken last, least recently freed first). */
  readonly freeBlocks: number;
  /** Free blocks that still hold a cached prefix. */
  readonly cachedFreeBlocks: number;
  /** Prompt tokens looked up in the prefix cache, and those found (vLLM's prefix_cache_queries / _hits). */
  readonly prefixQueries: number;
  readonly prefixHits: number;
}

const NONE = -1;

/**
 * The free blocks in eviction order, a doubly linked list over arrays (O(1) to take the head, append, and unlink a
 * block a prefix hit takes back): blocks without a cached prefix first (worth nothing), then cached ones, least
 * recently freed first.
 */
class FreeQueue {
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private readonly head: number; // sentinel index
  size = 0;

  constructor(n: number) {
    this.prev = new Int32Array(n + 1).fill(NONE);
    this.next = new Int32Array(n + 1).fill(NONE);
    this.head = n;
    this.prev[n] = n;
    this.next[n] = n;
    for (let b = 0; b < n; b++) this.append(b);
  }

  has(b: number): boolean {
    return this.next[b] !== NONE;
  }

  first(): number {
    return this.next[this.head]!;
  }

  append(b: number): void {
    this.linkAfter(b, this.prev[this.head]!);
  }

  prepend(b: number): void {
    this.linkAfter(b, this.head);
  }

  remove(b: number): void {
    const p = this.prev[b]!;
    const n = this.next[b]!;
    this.next[p] = n;
    this.prev[n] = p;
    this.prev[b] = NONE;
    this.next[b] = NONE;
    this.size--;
  }

  private linkAfter(b: number, p: number): void {
    const n = this.next[p]!;
    this.prev[b] = p;
    this.next[b] = n;
    this.next[p] = b;
    this.prev[n] = b;
    this.size++;
  }
}

export class KvBlocks {
  /** Sequences holding each block (a prefix shared by several counts each). */
  private readonly refs: Int32Array;
  /** The prefix hash a block is cached under, or null. */
  private readonly hashOf: (string | null)[];
  private readonly byHash = new Map<string, number>();
  private readonly free: FreeQueue;
  /** The chain's root: random per pool, so block hashes cannot be predicted from outside (vLLM's NONE_HASH). */
  private readonly root: Buffer = randomBytes(32);
  private queries = 0;
  private hits = 0;

  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
    readonly prefixCaching: boolean,
  ) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1) throw new ResidencyError('BAD_ARGUMENT', `KV pool numBlocks ${numBlocks}: expected an integer >= 1`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new ResidencyError('BAD_ARGUMENT', `KV pool blockSize ${blockSize}: expected an integer >= 1`);
    this.refs = new Int32Array(numBlocks);
    this.hashOf = new Array<string | null>(numBlocks).fill(null);
    this.free = new FreeQueue(numBlocks);
  }

  get freeBlocks(): number {
    return this.free.size;
  }

  /** Share of the pool held by sequences (vLLM's kv_cache_usage_perc: cached free blocks count as free). */
  get usage(): number {
    return 1 - this.free.size / this.numBlocks;
  }

  stats(): KvBlockStats {
    let cachedFree = 0;
    for (const b of this.byHash.values()) if (this.refs[b] === 0) cachedFree++;
    return { numBlocks: this.numBlocks, blockSize: this.blockSize, freeBlocks: this.free.size, cachedFreeBlocks: cachedFree, prefixQueries: this.queries, prefixHits: this.hits };
  }

  /** Blocks needed to hold positions 0..end-1. */
  blocksFor(end: number): number {
    return Math.ceil(end / this.blockSize);
  }

  /**
   * A sequence with no blocks joins with `tokens` known (prompt, and any generated before a preemption): finds its
   * longest cached prefix (when caching), then takes blocks for the positions up to cached + `want` new tokens.
   * At least the last token is always computed, so the step that computes it has its logits; a prompt found cached
   * to its last token, block-aligned, gets its own copy of the shared last block (copy-on-write) to recompute that
   * token into. Null, with nothing taken, when the free blocks are too few.
   */
  admit(seq: KvSequence, tokens: readonly number[], want: number): Admission | null {
    if (seq.blocks.length !== 0) throw new ResidencyError('INTERNAL', 'kv blocks: admit of a sequence that holds blocks');
    const bs = this.blockSize;
    const hit: number[] = [];
    if (this.prefixCaching) {
      this.extendHashes(seq, tokens);
      for (const h of seq.hashes) {
        const b = this.byHash.get(h);
        if (b === undefined) break;
        hit.push(b);
      }
    }
    let cachedTokens = hit.length * bs;
    // The last token must be computed: a prompt cached whole gets a copy of its last block to compute it into.
    const cow = cachedTokens >= tokens.length;
    if (cow) cachedTokens = tokens.length - 1;
    const end = Math.min(cachedTokens + Math.max(want, 1), tokens.length);
    const fresh = this.blocksFor(end) - (cow ? hit.length - 1 : hit.length);
    let touched = 0; // cached blocks no one holds: taking them back uses free blocks too
    for (const b of hit) if (this.refs[b] === 0) touched++;
    if (fresh + touched > this.free.size) return null;
    if (this.prefixCaching) {
      this.queries += tokens.length;
      this.hits += cachedTokens;
    }
    // Every hit held while fresh blocks are taken, so none of them is evicted to make room (the copy's source too).
    for (const b of hit) this.hold(b);
    const src = cow ? hit.pop()! : NONE;
    seq.blocks.push(...hit);
    seq.cached = hit.length;
    const copies: [number, number][] = [];
    for (let i = 0; i < fresh; i++) seq.blocks.push(this.take());
    if (cow) {
      copies.push([src, seq.blocks[hit.length]!]);
      this.unhold(src);
    }
    return { cachedTokens, copies };
  }

  /** Takes blocks so the sequence holds positions 0..end-1; false, with nothing taken, when too few are free. */
  grow(seq: KvSequence, end: number): boolean {
    const need = this.blocksFor(end) - seq.blocks.length;
    if (need <= 0) return true;
    if (need > this.free.size) return false;
    for (let i = 0; i < need; i++) seq.blocks.push(this.take());
    return true;
  }

  /**
   * The sequence's first `computed` positions are written: its full blocks among them join the prefix cache
   * (unless an equal prefix is cached already in another block: then this one stays private and is freed as any).
   */
  commit(seq: KvSequence, tokens: readonly number[], computed: number): void {
    if (!this.prefixCaching) return;
    const full = Math.min(Math.floor(computed / this.blockSize), seq.blocks.length);
    if (full <= seq.cached) return;
    this.extendHashes(seq, tokens);
    for (let i = seq.cached; i < full; i++) {
      const h = seq.hashes[i]!;
      const b = seq.blocks[i]!;
      if (!this.byHash.has(h) && this.hashOf[b] === null) {
        this.byHash.set(h, b);
        this.hashOf[b] = h;
      }
    }
    seq.cached = full;
  }

  /**
   * The sequence lets go of its blocks (ended, cancelled or preempted), last block first: of equally old cached
   * blocks, a sequence's tail is evicted before its head, which more requests share.
   */
  release(seq: KvSequence): void {
    for (let i = seq.blocks.length - 1; i >= 0; i--) {
      const b = seq.blocks[i]!;
      if (this.refs[b]! <= 0) throw new ResidencyError('INTERNAL', `kv blocks: block ${b} released more often than taken`);
      this.unhold(b);
    }
    seq.blocks.length = 0;
    seq.cached = 0;
  }

  /** Forgets every cached prefix (blocks stay where they are; the free ones become plain free blocks). */
  resetPrefixCache(): void {
    for (const [, b] of this.byHash) this.hashOf[b] = null;
    this.byHash.clear();
  }

  /** Sequences holding block `b` (tests). */
  refsOf(b: number): number {
    return this.refs[b]!;
  }

  private hold(b: number): void {
    if (this.refs[b] === 0) this.free.remove(b);
    this.refs[b]!++;
  }

  private unhold(b: number): void {
    if (--this.refs[b]! > 0) return;
    if (this.hashOf[b] === null) this.free.prepend(b); // holds nothing reusable: given out first
    else this.free.append(b);
  }

  /** The head of the free queue, its cached prefix (if any) evicted. */
  private take(): number {
    const b = this.free.first();
    if (b === this.numBlocks) throw new ResidencyError('INTERNAL', 'kv blocks: take from an empty free queue');
    this.free.remove(b);
    const h = this.hashOf[b];
    if (h !== null) {
      if (this.byHash.get(h!) === b) this.byHash.delete(h!);
      this.hashOf[b] = null;
    }
    this.refs[b] = 1;
    return b;
  }

  /** Hashes of every full block of `tokens` the sequence has not hashed yet, each chained to the one before. */
  private extendHashes(seq: KvSequence, tokens: readonly number[]): void {
    const bs = this.blockSize;
    const full = Math.floor(tokens.length / bs);
    const ids = new Int32Array(bs);
    for (let i = seq.hashes.length; i < full; i++) {
      for (let j = 0; j < bs; j++) ids[j] = tokens[i * bs + j]!;
      const parent = i === 0 ? this.root : Buffer.from(seq.hashes[i - 1]!, 'base64');
      seq.hashes.push(createHash('sha256').update(parent).update(new Uint8Array(ids.buffer)).digest('base64'));
    }
  }
}
