// Log-probabilities of a row of raw logits (log-softmax), for the OpenAI `logprobs` fields.
import type { TokenLogprob } from './types.ts';

/** The chosen token's log-probability and the `top` most likely tokens (descending; ties: lower id first). */
export function logprobsOf(logits: Float32Array, off: number, V: number, chosen: number, top: number): { logprob: number; top: TokenLogprob[] } {
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (logits[off + i]! > max) max = logits[off + i]!;
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(logits[off + i]! - max);
  const logZ = max + Math.log(sum);
  const best: TokenLogprob[] = [];
  if (top > 0) {
    // A bounded insertion list: top is at most 20, far below V.
    for (let i = 0; i < V; i++) {
      const v = logits[off + i]!;
      if (best.length === top && v <= best[top - 1]!.logprob) continue;
      let j = best.length < top ? best.length : top - 1;
      if (best.length < top) best.push({ id: i, logprob: v });
      while (j > 0 && best[j - 1]!.logprob < v) { best[j] = best[j - 1]!; j--; }
      best[j] = { id: i, logprob: v };
    }
  }
  return { logprob: logits[off + chosen]! - logZ, top: best.map((b) => ({ id: b.id, logprob: b.logprob - logZ })) };
}
