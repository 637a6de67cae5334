// What callers (CLI, server, benchmarks) see of the engine: submit a request, receive tokens, cancel.

export interface SamplingParams {
  /** 0 = greedy (argmax). */
  readonly temperature: number;
  /** Nucleus sampling mass in (0, 1]; 1 = off. */
  readonly topP: number;
  /** Seed for this request's sampler; the same seed and inputs give the same tokens. */
  readonly seed?: number;
  /** Tokens to generate at most (>= 1). */
  readonly maxTokens: number;
  /** Extra token ids that end the sequence (the model's EOS ids always do unless ignoreEos). */
  readonly stopTokenIds?: readonly number[];
  readonly ignoreEos?: boolean;
}

export interface GenerationRequest {
  readonly id: string;
  readonly promptIds: readonly number[];
  readonly sampling: SamplingParams;
}

export type FinishReason = 'stop' | 'length' | 'cancelled' | 'error';

export type GenerationEvent =
  | { readonly type: 'token'; readonly tokenId: number; readonly index: number }
  | {
      readonly type: 'done';
      readonly reason: FinishReason;
      readonly promptTokens: number;
      readonly completionTokens: number;
      /** Seconds from submit to the first generated token, when there was one. */
      readonly timeToFirstToken?: number;
      readonly error?: string;
    };

export interface RequestHandle {
  /** Stop generating; the request ends with reason 'cancelled' at the next step boundary. */
  cancel(): void;
}

/**
 * Continuous batching: requests join and leave the running batch at step boundaries. Events for one
 * request arrive in order, ending with exactly one 'done'.
 */
export interface GenerationEngine {
  submit(request: GenerationRequest, onEvent: (event: GenerationEvent) => void): RequestHandle;
  /** Requests waiting to join the batch. */
  readonly queueDepth: number;
  /** Sequences in the running batch. */
  readonly running: number;
  /** Finish in-flight work and stop the loop. */
  close(): Promise<void>;
}
