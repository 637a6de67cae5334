// The contract every backend (cpu, cuda, ...) fills: run a forward step over a batch, own the expert banks.
import type { ModelSpec } from '../model/spec.ts';

/** One sequence's part of a step: tokens fed at consecutive positions from `startPos`. */
export interface SequenceChunk {
  /** Sequence id: names the sequence within a step (once a step) and from one step to the next (FED_TOKEN). */
  readonly seq: number;
  readonly tokens: readonly number[];
  /** Position of tokens[0]; the KV cache must already hold positions 0..startPos-1. */
  readonly startPos: number;
  /**
   * The sequence's blocks of the backend's pool (`kvCache`), entry i holding positions [i x blockSize, (i+1) x blockSize),
   * at least up to position startPos + tokens.length - 1. The step writes this chunk's positions into them and reads
   * 0..startPos-1 from them as the caller wrote them earlier (or copied them: copyBlocks). Blocks may be shared
   * between sequences (a common prefix); no two chunks of a step write one block. The caller does not change the
   * array after passing it (a step submitted to run ahead may read it later). A chunk without one is refused.
   */
  readonly blockTable?: readonly number[];
}

/**
 * What keys and values are stored as (vLLM's --kv-cache-dtype names; 'auto' is resolved by whoever builds the
 * backend). Every backend rounds a stored value as kv-dtype.ts defines, so backends agree bit for bit.
 */
export type KvCacheDtype = 'float32' | 'bfloat16' | 'fp8';

/**
 * A paged backend's KV cache: one pool of blocks, each holding `blockSize` positions of every layer's keys and
 * values. The backend owns the memory; the engine owns which sequence holds which block (engine/kv-blocks.ts).
 */
export interface KvPool {
  /** Positions a block holds: the unit the engine allocates, shares between prefixes and copies. */
  readonly blockSize: number;
  /** Blocks in the pool, ids 0..numBlocks-1: what the engine hands out and preempts to get back. */
  readonly numBlocks: number;
  /** How stored keys and values are rounded (kv-dtype.ts): what a hit reuses must be what a recompute writes. */
  readonly dtype: KvCacheDtype;
  /** Bytes one block takes on this backend, every layer's keys and values: the pool's share of memory, reported. */
  readonly bytesPerBlock: number;
}

export interface StepInput {
  readonly chunks: readonly SequenceChunk[];
  /**
   * Count this step's routed picks into the counter table. The engine applies the rule (decode-like
   * steps of at most count_tmax tokens, counting switched on); the backend only obeys it.
   */
  readonly count: boolean;
  /** Also return each token's routing (for traces and parity tests). */
  readonly recordRouting?: boolean;
  /**
   * A buffer of at least chunks.length x vocabSize floats the logits are written into; the step's `logits`
   * is then a view of its start. A serving loop passes the same buffer every step, so no step allocates
   * (a fresh 600 KB array a token costs ~0.1 ms of host time at a 151,936-token vocabulary). Without it
   * every step returns a new array the caller owns.
   */
  readonly logitsInto?: Float32Array;
  /**
   * The caller needs only each chunk's argmax (greedy decoding, nothing reading the logits): the step returns
   * `argmax`, and its `logits` may be empty. A GPU backend then takes the argmax on the device and copies a
   * few bytes a row instead of the vocabulary's logits (600 KB a row at 151,936), and the host scans nothing.
   * `logitsInto` is then not used (nor checked).
   */
  readonly argmaxOnly?: boolean;
}

export interface StepOutput {
  /** [chunks.length][vocabSize]: the logits after each chunk's last token. */
  readonly logits: Float32Array;
  /** With recordRouting: [tokens][layers][topK] expert ids, descending router probability; tokens in chunk order. */
  readonly routing?: Int32Array;
  /** With recordRouting: the matching normalized routing weights. */
  readonly routingWeights?: Float32Array;
  /** With argmaxOnly: [chunks.length] each chunk's argmax (as `argmax` below picks it). */
  readonly argmax?: Int32Array;
  /**
   * With argmaxOnly: [chunks.length] 1 where that chunk's logits could not be picked from (a NaN, or no finite
   * largest value: argmax.ts argmaxFinite), and the engine then fails its sequence as the sampler would. A
   * backend that cannot tell leaves it out, and such a row is then served as its argmax.
   */
  readonly nonFinite?: Uint8Array;
}

/**
 * A chunk's token that is this sequence's argmax from the step just before, which the caller has not read back
 * yet (run-ahead decoding: Backend.submit). Only as a chunk's one token, and only when that step was an
 * argmaxOnly step holding the sequence; a GPU backend then feeds the token on the device.
 */
export const FED_TOKEN = -1;

/** A step started by Backend.submit: `wait()` blocks until it completes and returns what forward() would have. */
export interface PendingStep {
  wait(): StepOutput;
}

/** One exchange of a layer's hot row and cold row: what `requestSwap` asks for and `takeLanded` reports. */
export interface RowExchange {
  readonly layer: number;
  readonly hotRow: number;
  readonly coldRow: number;
}

/**
 * Each MoE layer's experts live as rows of two banks: the hot bank (fast memory, `hotPerLayer` rows) and
 * the cold bank (slow memory, the rest). A per-layer slot table maps expert -> row. Where an expert
 * lives never changes a result: banks are placement only.
 */
export interface ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** slot < hotPerLayer: hot row `slot`; otherwise cold row `slot - hotPerLayer`. */
  slotOf(layer: number, expert: number): number;
  /** The expert held by a row (inverse of slotOf). */
  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number;
  /**
   * Exchange the contents of hot row `hotRow` and cold row `coldRow` in `layer`, and the two experts'
   * slots, now: returns once the exchange has landed. Lossless: bytes move, nothing is converted. Only
   * between steps, and only when no move is in flight (placement before serving, tests).
   */
  swapRows(layer: number, hotRow: number, coldRow: number): void;
  /**
   * The same exchange, in the background: the bytes move while steps run and the exchange lands at a later
   * step boundary (reported once by `takeLanded`). Until it lands both experts stay where they were, so every
   * step reads whole, unchanged rows; no step ever reads a row being written. Refused (BAD_ARGUMENT) if either
   * row's expert is already moving. Backends whose copies are instant (CPU) land it at once. Between steps.
   */
  requestSwap(layer: number, hotRow: number, coldRow: number): void;
  /**
   * The requested exchanges that landed since the last call, in landing order (their slots already
   * changed). Call between steps: it also advances moves in flight (a backend may start their next copies).
   */
  takeLanded(): RowExchange[];
  /** Exchanges requested and not landed yet. */
  readonly moving: number;
  /**
   * Exchanges that a requestSwap now would start copying at once (Infinity where copies are instant). A caller that
   * asks for no more keeps its decisions in its own queue, where later counts can replace them, rather than in
   * a backlog of copies the banks start long after they were decided.
   */
  readonly startable: number;
  /** A content hash of every layer's hot and cold bank bytes (restore checks). */
  digest(): string;
}

export interface Backend {
  readonly name: string;
  readonly spec: ModelSpec;
  readonly banks: ExpertBanks;
  /** The paged KV cache: every chunk carries its blockTable into it. */
  readonly kvCache: KvPool;
  /**
   * Copies every layer's keys and values of block `src` into block `dst`, pair by pair in order (copy-on-write: a
   * sequence about to write a block it shares gets its own copy first). Between steps; a step submitted after it sees
   * the copies.
   */
  copyBlocks(pairs: readonly (readonly [src: number, dst: number])[]): void;
  forward(input: StepInput): StepOutput;
  /**
   * Starts a step and returns before it completes, so the caller can plan the next while this one runs
   * (run-ahead decoding: the next step's chunks feed each sequence's argmax with FED_TOKEN). Steps run in
   * submission order; wait() for each before the one after the next is submitted. Optional: a backend without
   * it is driven through forward().
   */
  submit?(input: StepInput): PendingStep;
  /**
   * The counter table, [layers][experts] uint32, cumulative since creation (wraps at 2^32; take deltas
   * with unsigned subtraction). One increment per routed pick in steps run with `count: true`.
   */
  readCounter(): Uint32Array;
  dispose(): void;
}
