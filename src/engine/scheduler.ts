// Decides which sequences run in the next step: decode tokens first, then prefill chunks, within a token budget;
// requests join the running batch from a bounded waiting queue and leave it at step boundaries. On a paged
// backend each token needs room in the KV pool: a request joins only when its first chunk fits, a prompt found in
// the prefix cache starts past it, and when a running sequence cannot grow, the newest is preempted (its blocks
// given back, the request put first in the queue to be recomputed later: vLLM's rule; the client sees a delay only).
import { ResidencyError } from '../errors.ts';
import type { KvSpace } from './kv-space.ts';
import type { RequestState } from './request.ts';

export interface SchedulerConfig {
  /** Sequences in the running batch at most (--max-num-seqs, alias --max-running). */
  readonly maxRunning: number;
  /** Requests waiting to join at most; a submit beyond it is refused (back-pressure, not a growing queue). */
  readonly maxWaiting: number;
  /** Tokens fed in one step at most, decode tokens + prefill chunks (--max-num-batched-tokens); bounds a step's latency. */
  readonly maxStepTokens: number;
}

/** Defaults. The engine's maxRunning default is as many sequences as the pool has blocks, up to MAX_DEFAULT_RUNNING. */
export const DEFAULT_SCHEDULER: SchedulerConfig = { maxRunning: 8, maxWaiting: 256, maxStepTokens: 2048 };

/** The most sequences a paged backend runs at once by default (vLLM's max_num_seqs default). */
export const MAX_DEFAULT_RUNNING = 256;

/** One sequence's share of a step. */
export interface ScheduledChunk {
  readonly req: RequestState;
  /** Tokens fed: req.tokens[startPos .. startPos + count). */
  readonly count: number;
  readonly startPos: number;
  /** This chunk reaches the last known token, so its logits choose the next token. */
  readonly samples: boolean;
}

/** The plan of one step. */
export interface ScheduledStep {
  readonly chunks: readonly ScheduledChunk[];
  /** Requests that joined the running batch this step. */
  readonly admitted: readonly RequestState[];
  /** Requests cancelled since the last step (they leave now, without running). */
  readonly cancelled: readonly RequestState[];
  /** Requests that could not join (their backend sequence was refused): they end with the error. */
  readonly failed: readonly { readonly req: RequestState; readonly error: Error }[];
  /** Tokens fed. */
  readonly tokens: number;
  /**
   * The tokens the residency counting rule weighs the step by: those fed, plus the prompt tokens a prefix-cache hit
   * stood for in a chunk that starts after one, so a prefill does not look like a decode step because it hit.
   */
  readonly countTokens: number;
}

export class Scheduler {
  readonly waiting: RequestState[] = [];
  readonly running: RequestState[] = [];
  /** Requests preempted since start (vLLM's num_preemptions). */
  preemptions = 0;

  constructor(
    readonly config: SchedulerConfig,
    readonly kv: KvSpace,
  ) {
    for (const [k, v] of Object.entries(config)) {
      if (!Number.isInteger(v) || v < 1) throw new ResidencyError('BAD_ARGUMENT', `scheduler ${k} ${v}: expected an integer >= 1`);
    }
  }

  add(req: RequestState): void {
    if (this.waiting.length >= this.config.maxWaiting) {
      throw new ResidencyError(
        'NOT_AVAILABLE',
        `the waiting queue is full (${this.config.maxWaiting} requests): retry later or raise maxWaiting`,
      );
    }
    this.waiting.push(req);
  }

  get idle(): boolean {
    return this.waiting.length === 0 && this.running.length === 0;
  }

  schedule(): ScheduledStep {
    const cancelled: RequestState[] = [];
    const keep = (list: RequestState[]): void => {
      for (let i = list.length - 1; i >= 0; i--) {
        if (list[i]!.cancelled) cancelled.push(...list.splice(i, 1));
      }
    };
    keep(this.running);
    keep(this.waiting);
    for (const req of cancelled) this.leave(req);

    const chunks: ScheduledChunk[] = [];
    let budget = this.config.maxStepTokens;
    let preempted = false;
    const plan = (req: RequestState, count: number): void => {
      budget -= count;
      chunks.push({ req, count, startPos: req.computed, samples: req.computed + count === req.tokens.length });
    };
    // Room for `req`'s next `count` tokens, preempting the newest running requests until there is; false when
    // `req` itself was the newest (it went back to the queue).
    const room = (req: RequestState, count: number): boolean => {
      while (!this.kv.grow(req, req.computed + count)) {
        const victim = this.running[this.running.length - 1]!;
        this.preempt(victim);
        preempted = true;
        const i = chunks.findIndex((c) => c.req === victim);
        if (i >= 0) budget += chunks.splice(i, 1)[0]!.count;
        if (victim === req) return false;
      }
      return true;
    };
    // Decode first: a running sequence's next token never waits behind someone's prompt.
    for (const pass of [false, true]) {
      for (const req of [...this.running]) {
        if (req.prefilling !== pass || !this.running.includes(req)) continue;
        const count = Math.min(req.pending, budget);
        if (count > 0 && room(req, count)) plan(req, count);
      }
    }
    const admitted: RequestState[] = [];
    const failed: { req: RequestState; error: Error }[] = [];
    let hitTokens = 0;
    // No one joins in a step that had to preempt (vLLM's rule): the room it freed goes to the running first.
    while (!preempted && budget > 0 && this.waiting.length > 0 && this.running.length < this.config.maxRunning) {
      const req = this.waiting[0]!;
      let got: { cachedTokens: number } | null;
      try {
        got = this.kv.admit(req, Math.min(req.tokens.length, budget));
      } catch (err) {
        this.waiting.shift();
        failed.push({ req, error: err as Error });
        continue;
      }
      if (!got) break; // no room now: it stays first in the queue
      this.waiting.shift();
      req.computed = got.cachedTokens;
      hitTokens += got.cachedTokens;
      this.running.push(req);
      admitted.push(req);
      plan(req, Math.min(req.pending, budget));
    }
    let tokens = 0;
    for (const c of chunks) tokens += c.count;
    return { chunks, admitted, cancelled, failed, tokens, countTokens: tokens + hitTokens };
  }

  /** The step ran: each request's newly written positions join the prefix cache. */
  committed(req: RequestState): void {
    this.kv.commit(req);
  }

  /** Removes a finished request from the batch (or the queue) and lets go of its room. */
  finish(req: RequestState): void {
    const i = this.running.indexOf(req);
    if (i >= 0) this.running.splice(i, 1);
    const w = this.waiting.indexOf(req);
    if (w >= 0) this.waiting.splice(w, 1);
    this.leave(req);
  }

  /** Room held, as a share (0..1). */
  get usage(): number {
    return this.kv.usage(this.running, this.config.maxRunning);
  }

  private leave(req: RequestState): void {
    this.kv.release(req);
  }

  /** Back to the head of the queue with nothing computed: it is prefilled again (prompt and tokens so far) later. */
  private preempt(req: RequestState): void {
    this.running.splice(this.running.indexOf(req), 1);
    this.leave(req);
    req.computed = 0;
    req.preemptions++;
    this.preemptions++;
    this.waiting.unshift(req);
  }
}
