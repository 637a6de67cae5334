// One request's state inside the engine: its tokens so far, how many the KV cache holds, and how it ends.
import type { FinishReason, GenerationEvent, GenerationRequest } from './types.ts';
import { Sampler } from './sampler.ts';

export class RequestState {
  /** Prompt then generated tokens; the KV cache holds the first `computed` of them. */
  readonly tokens: number[];
  computed = 0;
  /** Tokens generated and emitted so far. */
  generated = 0;
  /** Backend sequence id, set when the request joins the running batch. */
  seq = -1;
  /** Positions the request may reach, prompt + output: its max tokens within the model's and the KV cache's room. */
  capacity = 0;
  /** Times it was preempted (its KV cache given back, recomputed when it ran again). */
  preemptions = 0;
  cancelled = false;
  /** Why the server (not the client) cancelled it, told to the client in the 'done' event. */
  cancelReason: string | undefined = undefined;
  finished: FinishReason | null = null;
  firstTokenAt: number | null = null;
  readonly sampler: Sampler;
  /** Token ids that end the request: the model's EOS (unless ignoreEos) and the request's stop ids. */
  readonly stopIds: ReadonlySet<number>;

  constructor(
    readonly request: GenerationRequest,
    readonly onEvent: (event: GenerationEvent) => void,
    eosTokenIds: readonly number[],
    readonly submittedAt: number,
  ) {
    this.tokens = [...request.promptIds];
    this.sampler = new Sampler(request.sampling, request.promptIds);
    const stop = new Set(request.sampling.stopTokenIds ?? []);
    if (!request.sampling.ignoreEos) for (const id of eosTokenIds) stop.add(id);
    this.stopIds = stop;
  }

  get promptTokens(): number {
    return this.request.promptIds.length;
  }

  /** Still feeding known tokens (the prompt, or everything again after a preemption): more than one left to compute. */
  get prefilling(): boolean {
    return this.computed < this.tokens.length - 1;
  }

  /** Tokens the next step may feed: the rest of the prompt, or the one token just generated. */
  get pending(): number {
    return this.tokens.length - this.computed;
  }

  /** Delivers an event; a throwing consumer must not break the engine loop. */
  emit(event: GenerationEvent): void {
    try {
      this.onEvent(event);
    } catch {
      // The consumer's bug is its own; the other requests in the batch carry on.
    }
  }
}
