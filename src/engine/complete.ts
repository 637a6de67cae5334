// Small helpers for the CLI, tests and benchmarks: a synchronous greedy loop on a backend, and running a
// set of requests through an engine to completion.
import { type Backend } from '../backend/backend.ts';
import { argmax } from '../backend/argmax.ts';
import { DirectSequences } from '../backend/sequences.ts';
import type { FinishReason, GenerationEngine, GenerationRequest } from './types.ts';

/**
 * Greedy decoding of one prompt straight on a backend, no engine: prefill in one chunk, then one token
 * per step. Does not stop on EOS (a reference loop, like the fixture's). Uses sequence id `seq`.
 */
export function generateGreedy(backend: Backend, promptIds: readonly number[], maxTokens: number, seq = 0x7fffffff): number[] {
  const V = backend.spec.vocabSize;
  const seqs = new DirectSequences(backend);
  seqs.open(seq, promptIds.length + maxTokens);
  try {
    const out: number[] = [];
    const into = new Float32Array(V); // every step's logits, no allocation a token
    let { logits } = seqs.forward({ chunks: [{ seq, tokens: promptIds, startPos: 0 }], count: false, logitsInto: into });
    for (let i = 0; i < maxTokens; i++) {
      const token = argmax(logits, 0, V);
      out.push(token);
      if (i + 1 === maxTokens) break;
      ({ logits } = seqs.forward({ chunks: [{ seq, tokens: [token], startPos: promptIds.length + i }], count: false, logitsInto: into }));
    }
    return out;
  } finally {
    seqs.close(seq);
  }
}

export interface Completion {
  readonly tokens: number[];
  readonly reason: FinishReason;
  readonly timeToFirstToken?: number;
  readonly error?: string;
}

/** Submits every request at once and resolves when all are done, with each request's tokens. */
export function runToCompletion(engine: GenerationEngine, requests: readonly GenerationRequest[]): Promise<Map<string, Completion>> {
  const results = new Map<string, Completion>();
  return new Promise((resolve, reject) => {
    let left = requests.length;
    if (left === 0) resolve(results);
    for (const r of requests) {
      const tokens: number[] = [];
      try {
        engine.submit(r, (ev) => {
          if (ev.type === 'token') tokens.push(ev.tokenId);
          else {
            results.set(r.id, { tokens, reason: ev.reason, timeToFirstToken: ev.timeToFirstToken, error: ev.error });
            if (--left === 0) resolve(results);
          }
        });
      } catch (err) {
        reject(err);
        return;
      }
    }
  });
}
