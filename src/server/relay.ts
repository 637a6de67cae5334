// Submits one request to the engine and relays its events as text deltas: admission (a bounded queue),
// stop strings, cancellation when the client goes away, and latency metrics.
import { randomUUID } from 'node:crypto';
import type { FinishReason, GenerationEngine, GenerationEvent, SamplingParams, TokenConstraint, TokenLogprob } from '../engine/types.ts';
import { ApiError } from './api-error.ts';
import { TextAssembler } from './detokenize.ts';
import type { ServerMetrics } from './metrics.ts';
import type { ServerTokenizer } from './types.ts';

export interface RelayJob {
  readonly promptIds: readonly number[];
  readonly sampling: SamplingParams;
  readonly stops: readonly string[];
}

/** A generated token with its log-probabilities (present when the job asked for them). */
export interface RelayToken {
  readonly id: number;
  readonly logprob?: number;
  readonly top?: readonly TokenLogprob[];
}

export type RelayItem =
  /** `tokens`: the tokens behind this text (with logprobs jobs only; held-back text's tokens travel with the next item). */
  | { readonly type: 'text'; readonly text: string; readonly tokens?: readonly RelayToken[] }
  | {
      readonly type: 'done';
      /** OpenAI's finish_reason: a matched stop string is 'stop' too. */
      readonly finishReason: 'stop' | 'length';
      readonly promptTokens: number;
      readonly completionTokens: number;
    };

export interface RelayContext {
  readonly engine: GenerationEngine;
  readonly tokenizer: ServerTokenizer;
  readonly metrics: ServerMetrics;
  readonly maxQueue: number;
  readonly log: (line: string) => void;
}

/** Refuses new work while the engine's waiting queue is full, or would be with this request's `sequences` (the client should retry later). */
export function admit(ctx: RelayContext, sequences = 1): void {
  if (sequences > ctx.maxQueue) {
    throw new ApiError(400, `this request needs ${sequences} sequences (prompts x n) but the server queues at most ${ctx.maxQueue}: send fewer prompts or a smaller n`, { param: 'n', code: 'invalid_value' });
  }
  if (ctx.engine.queueDepth + sequences > ctx.maxQueue) {
    throw new ApiError(429, `server busy: ${ctx.engine.queueDepth} requests are waiting (limit ${ctx.maxQueue}); retry shortly`, {
      type: 'rate_limit_error', code: 'queue_full', headers: { 'Retry-After': '1' },
    });
  }
}

/**
 * Runs one request (call `admit` first, before any response header is sent). The iterator yields text deltas then exactly one 'done'; stopping the iteration
 * early (return/throw) or aborting `signal` cancels the engine's sequence.
 */
export async function* relay(ctx: RelayContext, job: RelayJob, signal: AbortSignal): AsyncGenerator<RelayItem, void, undefined> {
  const events: GenerationEvent[] = [];
  let wake: (() => void) | null = null;
  const submitted = performance.now();
  let lastTokenAt = 0;
  const handle = ctx.engine.submit({ id: randomUUID(), promptIds: job.promptIds, sampling: job.sampling }, (ev) => {
    if (ev.type === 'token') {
      const now = performance.now();
      if (lastTokenAt === 0) ctx.metrics.timeToFirstToken.observe((now - submitted) / 1000);
      else ctx.metrics.interTokenLatency.observe((now - lastTokenAt) / 1000);
      lastTokenAt = now;
    }
    events.push(ev);
    wake?.();
  });
  let finished = false;
  const onAbort = () => handle.cancel();
  signal.addEventListener('abort', onAbort, { once: true });
  if (signal.aborted) handle.cancel();

  const text = new TextAssembler(ctx.tokenizer, job.stops);
  const withLogprobs = job.sampling.logprobs !== undefined;
  let held: RelayToken[] = [];
  const textItem = (t: string): RelayItem => {
    if (!withLogprobs) return { type: 'text', text: t };
    const tokens = held;
    held = [];
    return { type: 'text', text: t, tokens };
  };
  let generated = 0;
  try {
    for (;;) {
      if (events.length === 0) await new Promise<void>((r) => (wake = r));
      wake = null;
      const batch = events.splice(0);
      for (const ev of batch) {
        if (ev.type === 'token') {
          if (text.stopped) continue; // tokens that were already in flight when a stop string matched
          generated++;
          ctx.metrics.countToken();
          if (withLogprobs && !ctx.tokenizer.eosTokenIds.includes(ev.tokenId)) held.push({ id: ev.tokenId, ...(ev.logprob !== undefined ? { logprob: ev.logprob } : {}), ...(ev.topLogprobs ? { top: ev.topLogprobs } : {}) });
          const delta = text.push(ev.tokenId);
          if (delta) yield textItem(delta);
          if (text.stopped) handle.cancel();
          continue;
        }
        finished = true;
        ctx.metrics.promptTokens.inc(ev.promptTokens);
        ctx.metrics.requestLatency.observe((performance.now() - submitted) / 1000);
        const counted = text.stopped ? 'stop' : ev.reason === 'cancelled' ? (signal.aborted ? 'abort' : 'cancelled') : ev.reason;
        ctx.metrics.requestsByFinish.inc({ finished_reason: counted });
        const reason = finishReason(ev.reason, text.stopped, signal.aborted, ev.error);
        const tail = text.finish();
        if (tail || held.length > 0) yield textItem(tail);
        yield { type: 'done', finishReason: reason, promptTokens: ev.promptTokens, completionTokens: text.stopped ? generated : Math.max(generated, ev.completionTokens) };
        return;
      }
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    if (!finished) handle.cancel();
  }
}

function finishReason(reason: FinishReason, stoppedByText: boolean, aborted: boolean, error?: string): 'stop' | 'length' {
  if (stoppedByText) return 'stop';
  if (reason === 'error') throw new ApiError(500, `generation failed: ${error ?? 'unknown engine error'}`, { code: 'engine_error' });
  if (reason === 'cancelled') {
    if (aborted) throw new ApiError(499 as never, 'client closed the request', { code: 'cancelled' });
    throw new ApiError(503, error ?? 'the request was cancelled by the server (shutting down?)', { code: error ? 'shutting_down' : 'cancelled' });
  }
  return reason;
}

/** The OpenAI (and vLLM) request fields that shape sampling. */
export interface SamplingFields {
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  seed?: number | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  repetition_penalty?: number | null;
  ignore_eos?: boolean | null;
}

/**
 * Sampling parameters from an OpenAI request's fields (greedy when temperature is 0). Neutral values
 * (penalty 0, repetition 1, top_k -1/0, min_p 0) are left out, so they cost nothing and change nothing.
 */
export function samplingFrom(req: SamplingFields, maxTokens: number, extra: { logprobs?: number; constraint?: TokenConstraint; seedOffset?: number } = {}): SamplingParams {
  return {
    temperature: req.temperature ?? 1,
    topP: req.top_p ?? 1,
    maxTokens,
    ...(req.seed != null ? { seed: (req.seed + (extra.seedOffset ?? 0)) >>> 0 } : {}),
    ...(req.ignore_eos ? { ignoreEos: true } : {}),
    ...(req.top_k != null && req.top_k > 0 ? { topK: req.top_k } : {}),
    ...(req.min_p ? { minP: req.min_p } : {}),
    ...(req.presence_penalty ? { presencePenalty: req.presence_penalty } : {}),
    ...(req.frequency_penalty ? { frequencyPenalty: req.frequency_penalty } : {}),
    ...(req.repetition_penalty != null && req.repetition_penalty !== 1 ? { repetitionPenalty: req.repetition_penalty } : {}),
    ...(extra.logprobs !== undefined ? { logprobs: extra.logprobs } : {}),
    ...(extra.constraint ? { constraint: extra.constraint } : {}),
  };
}

/** max_tokens: what the request asked (else `fallback`), bounded by the room the prompt leaves in the context. */
export function resolveMaxTokens(asked: number | null | undefined, promptTokens: number, maxPositions: number, param: string, fallback: number): number {
  const room = maxPositions - promptTokens;
  if (promptTokens === 0) throw new ApiError(400, 'the prompt is empty: send at least one token of text', { param: 'prompt', code: 'invalid_value' });
  if (room < 1) {
    throw new ApiError(400, `the prompt is ${promptTokens} tokens; the model's context is ${maxPositions}: shorten the prompt`, { param: 'prompt', code: 'context_length_exceeded' });
  }
  if (asked == null) return Math.min(room, fallback);
  if (asked > room) {
    throw new ApiError(400, `${param} is ${asked} but the prompt (${promptTokens} tokens) leaves room for ${room} in the model's context of ${maxPositions}`, { param, code: 'context_length_exceeded' });
  }
  return asked;
}
