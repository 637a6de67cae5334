// The contract every backend (cpu, cuda, ...) fills: run a forward step over a batch, own the expert banks.
import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from '../model/spec.ts';

/** One sequence's part of a step: tokens fed at consecutive positions from `startPos`. */
export interface SequenceChunk {
  /** Sequence id, opened with `openSequence` (owns a KV cache). */
  readonly seq: number;
  readonly tokens: readonly number[];
  /** Position of tokens[0]; the KV cache must already hold positions 0..startPos-1. */
  readonly startPos: number;
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
}

/**
 * Index of the largest of x[off..off+n) (first on ties, as torch.argmax; a NaN never wins, as on the device:
 * 0 when every value is NaN). The one greedy pick: the sampler's, the tests', a backend's argmaxOnly.
 */
export function argmax(x: Float32Array, off: number, n: number): number {
  let best = 0;
  while (best < n && Number.isNaN(x[off + best]!)) best++; // from the first value that is not NaN
  if (best === n) return 0;
  let bestV = x[off + best]!;
  for (let i = best + 1; i < n; i++) {
    const v = x[off + i]!;
    if (v > bestV) {
      bestV = v;
      best = i;
    }
  }
  return best;
}

/** A step's output with `argmax` taken on the host from its logits, when the input asked for argmaxOnly. */
export function withHostArgmax(input: StepInput, out: StepOutput, vocabSize: number): StepOutput {
  if (input.argmaxOnly !== true) return out;
  const a = new Int32Array(input.chunks.length);
  for (let i = 0; i < a.length; i++) a[i] = argmax(out.logits, i * vocabSize, vocabSize);
  return { ...out, argmax: a };
}

/**
 * Decodes device argmax keys (kernels/common.cuh argmax_key: the logit's order-preserving bits, then
 * 0xffffffff - index; larger wins), the best of `n` 64-bit keys from `at` (in keys' 32-bit words, little
 * endian). A row of no key (all NaN: every key 0) gives 0, as argmax does.
 */
export function bestArgmaxKey(words: Uint32Array, at: number, n: number): number {
  let hi = 0;
  let lo = 0;
  for (let i = 0; i < n; i++) {
    const h = words[at + 2 * i + 1]!, l = words[at + 2 * i]!;
    if (h > hi || (h === hi && l > lo)) {
      hi = h;
      lo = l;
    }
  }
  return hi === 0 && lo === 0 ? 0 : 0xffffffff - lo;
}

/** Row `row`'s argmax from device keys copied to host bytes, `blocks` 64-bit keys a row (bestArgmaxKey). */
export function argmaxOfRow(keys: Uint8Array, row: number, blocks: number): number {
  return bestArgmaxKey(new Uint32Array(keys.buffer, keys.byteOffset, keys.byteLength >> 2), 2 * blocks * row, blocks);
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

/**
 * FED_TOKEN for a backend that takes the argmax on the host: each sequence's argmax of the last step, put in
 * for a fed chunk of the next one (and only the next: any step in between forgets them).
 */
export class HostFedTokens {
  private last = new Map<number, number>();

  /** The input with every fed token replaced; throws naming the chunk when a fed token has no argmax to come from. */
  resolve(input: StepInput): StepInput {
    const last = this.last;
    this.last = new Map();
    if (!input.chunks.some((c) => c.tokens.includes(FED_TOKEN))) return input;
    return { ...input, chunks: withFedTokens(input.chunks, (seq) => last.get(seq)) };
  }

  /** Remembers the step's argmax per sequence (an argmaxOnly step), for the next step's fed tokens. */
  record(input: StepInput, out: StepOutput): void {
    if (out.argmax) input.chunks.forEach((c, i) => this.last.set(c.seq, out.argmax![i]!));
  }
}

/** The chunks with each fed token replaced by `tokenOf` its sequence; throws naming the chunk when it has none. */
export function withFedTokens(chunks: readonly SequenceChunk[], tokenOf: (seq: number) => number | undefined): SequenceChunk[] {
  return chunks.map((c) => {
    if (!c.tokens.includes(FED_TOKEN)) return c;
    const t = c.tokens.length === 1 ? tokenOf(c.seq) : undefined;
    if (t === undefined) throw fedTokenError(c);
    return { ...c, tokens: [t] };
  });
}

/** The refusal of a fed token that no argmax of the step just before can fill. */
export function fedTokenError(c: SequenceChunk): ResidencyError {
  return new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} has a fed token (FED_TOKEN) but ${c.tokens.length !== 1 ? `${c.tokens.length} tokens (a fed chunk has one)` : 'the step just before was not an argmaxOnly step holding it'}`);
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
  /** Reserve a KV cache for `seq` holding up to `capacity` positions. */
  openSequence(seq: number, capacity: number): void;
  closeSequence(seq: number): void;
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

/** The array a step's logits go into: a view of the caller's `logitsInto` (checked for size), else a new one. */
export function logitsOut(input: StepInput, vocabSize: number): Float32Array {
  const n = input.chunks.length * vocabSize;
  const into = input.logitsInto;
  if (into === undefined) return new Float32Array(n);
  if (!(into instanceof Float32Array) || into.length < n) {
    throw new ResidencyError('BAD_ARGUMENT', `logitsInto: expected a Float32Array of at least ${input.chunks.length} x ${vocabSize} = ${n} floats, got ${into instanceof Float32Array ? into.length : typeof into}`);
  }
  return into.subarray(0, n);
}

/**
 * For banks whose swaps are instant (memory the host writes directly): a requested exchange is made at once
 * and reported by the next takeLanded.
 */
export class InstantMoves {
  private landed: RowExchange[] = [];
  private readonly busy = new Set<string>();

  constructor(private readonly banks: Pick<ExpertBanks, 'swapRows' | 'expertAt'>) {}

  request(layer: number, hotRow: number, coldRow: number): void {
    const hot = this.banks.expertAt(layer, 'hot', hotRow);
    const cold = this.banks.expertAt(layer, 'cold', coldRow);
    for (const e of [hot, cold]) {
      if (this.busy.has(`${layer}/${e}`)) throw new ResidencyError('BAD_ARGUMENT', `requestSwap: layer ${layer} expert ${e} is already moving`);
    }
    this.banks.swapRows(layer, hotRow, coldRow);
    this.busy.add(`${layer}/${hot}`).add(`${layer}/${cold}`);
    this.landed.push({ layer, hotRow, coldRow });
  }

  take(): RowExchange[] {
    const out = this.landed;
    this.landed = [];
    this.busy.clear();
    return out;
  }

  get moving(): number {
    return this.landed.length;
  }

  readonly startable = Infinity;
}
