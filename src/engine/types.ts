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
  /** Keep only the K most likely tokens before drawing; 0 or absent = off. */
  readonly topK?: number;
  /** Drop tokens whose probability is below minP x the top token's; 0 or absent = off. */
  readonly minP?: number;
  /** OpenAI's penalties over the generated tokens: logit -= frequency x count + presence x (count > 0). */
  readonly presencePenalty?: number;
  readonly frequencyPenalty?: number;
  /** vLLM/transformers' penalty over prompt and generated tokens: a seen token's logit / r if > 0, else x r; 1 = off. */
  readonly repetitionPenalty?: number;
  /** Report each token's log-probability and this many most likely alternatives (0..20); absent = none. */
  readonly logprobs?: number;
  /** Masks the tokens that may not come next (structured output); the request ends 'stop' once it is complete. */
  readonly constraint?: TokenConstraint;
}

/**
 * A per-request grammar over the vocabulary (e.g. JSON): stateful, owned by one request. `mask` must
 * leave at least one token allowed while `complete` is false.
 */
export interface TokenConstraint {
  /** Sets logits[off + id] to -Infinity for every token id that may not come next. */
  mask(logits: Float32Array, off: number, vocabSize: number): void;
  /** The token chosen (always one `mask` allowed). */
  accept(tokenId: number): void;
  /** The output is a whole sentence of the grammar: generation ends here. */
  readonly complete: boolean;
}

/** A token's log-probability under the model (log-softmax of its raw logits, before penalties and temperature). */
export interface TokenLogprob {
  readonly id: number;
  readonly logprob: number;
}

export interface GenerationRequest {
  readonly id: string;
  readonly promptIds: readonly number[];
  readonly sampling: SamplingParams;
}

export type FinishReason = 'stop' | 'length' | 'cancelled' | 'error';

export type GenerationEvent =
  | {
      readonly type: 'token';
      readonly tokenId: number;
      readonly index: number;
      /** With sampling.logprobs: this token's log-probability and the most likely alternatives. */
      readonly logprob?: number;
      readonly topLogprobs?: readonly TokenLogprob[];
    }
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
  /** The KV cache's held share (0..1): a paged pool's blocks in use, else positions reserved / what the batch may hold. */
  readonly kvCacheUsage?: number;
  /** A paged KV cache's figures (null or absent: the backend has no pool). */
  readonly kvCache?: KvCacheStats | null;
  /** Requests preempted since start (their KV cache given back, recomputed later). */
  readonly preemptions?: number;
  /** Finish in-flight work and stop the loop. */
  close(): Promise<void>;
}

/** A paged KV cache as the engine accounts it (/metrics, /v1/residency, the boot line). */
export interface KvCacheStats {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly dtype: 'float32' | 'bfloat16' | 'fp8';
  readonly bytesPerBlock: number;
  /** Blocks no running sequence holds (cached free blocks among them). */
  readonly freeBlocks: number;
  /** Free blocks still holding a cached prefix. */
  readonly cachedFreeBlocks: number;
  /** Blocks held, as a share of the pool (0..1). */
  readonly usage: number;
  readonly prefixCaching: boolean;
  /** Prompt tokens looked up in the prefix cache, and those found. */
  readonly prefixQueries: number;
  readonly prefixHits: number;
  /** Requests preempted (their blocks given back, recomputed later). */
  readonly preemptions: number;
}
