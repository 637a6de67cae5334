// Decides which sequences run in the next step: decode tokens first, then prefill chunks, within a token
// budget; requests join the running batch from a bounded waiting queue and leave it at step boundaries.
import { ResidencyError } from '../errors.ts';
import type { RequestState } from './request.ts';

export interface SchedulerConfig {
  /** Sequences in the running batch at most (each holds a KV cache). */
  readonly maxRunning: number;
  /** Requests waiting to join at most; a submit beyond it is refused (back-pressure, not a growing queue). */
  readonly maxWaiting: number;
  /** Tokens fed in one step at most (decode tokens + prefill chunks); bounds a step's latency. */
  readonly maxStepTokens: number;
}

export const DEFAULT_SCHEDULER: SchedulerConfig = { maxRunning: 8, maxWaiting: 256, maxStepTokens: 256 };

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
  /** Requests that joined the running batch this step (they need a KV cache before execution). */
  readonly admitted: readonly RequestState[];
  /** Requests cancelled since the last step (they leave now, without running). */
  readonly cancelled: readonly RequestState[];
  readonly tokens: number;
}

export class Scheduler {
  readonly waiting: RequestState[] = [];
  readonly running: RequestState[] = [];

  constructor(readonly config: SchedulerConfig = DEFAULT_SCHEDULER) {
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

    const chunks: ScheduledChunk[] = [];
    let budget = this.config.maxStepTokens;
    const take = (req: RequestState): void => {
      const count = Math.min(req.pending, budget);
      if (count <= 0) return;
      budget -= count;
      chunks.push({ req, count, startPos: req.computed, samples: req.computed + count === req.tokens.length });
    };
    // Decode first: a running sequence's next token never waits behind someone's prompt.
    for (const req of this.running) if (!req.prefilling) take(req);
    for (const req of this.running) if (req.prefilling) take(req);
    const admitted: RequestState[] = [];
    while (budget > 0 && this.waiting.length > 0 && this.running.length < this.config.maxRunning) {
      const req = this.waiting.shift()!;
      this.running.push(req);
      admitted.push(req);
      take(req);
    }
    let tokens = 0;
    for (const c of chunks) tokens += c.count;
    return { chunks, admitted, cancelled, tokens };
  }

  /** Removes a finished request from the running batch. */
  finish(req: RequestState): void {
    const i = this.running.indexOf(req);
    if (i >= 0) this.running.splice(i, 1);
  }
}
