// What changes a row of logits before a token is drawn: penalties over the tokens seen so far, and a
// structured-output constraint. Works on a copy: the backend's logits stay as the model produced them.
import type { SamplingParams } from './types.ts';

/** Tokens seen by one request: the prompt's set (repetition penalty) and the generated counts (OpenAI's penalties). */
export class TokenHistory {
  readonly prompt: ReadonlySet<number>;
  readonly generated = new Map<number, number>();
  constructor(promptIds: readonly number[]) {
    this.prompt = new Set(promptIds);
  }
  add(id: number): void {
    this.generated.set(id, (this.generated.get(id) ?? 0) + 1);
  }
}

type Penalties = Pick<SamplingParams, 'presencePenalty' | 'frequencyPenalty' | 'repetitionPenalty'>;

export function hasPenalties(p: Penalties): boolean {
  return (p.presencePenalty ?? 0) !== 0 || (p.frequencyPenalty ?? 0) !== 0 || (p.repetitionPenalty ?? 1) !== 1;
}

/**
 * Applies the penalties in vLLM's order: repetition (prompt + generated: divide a positive logit by r,
 * multiply a negative one), then frequency and presence (generated only).
 */
export function applyPenalties(row: Float32Array, p: Penalties, h: TokenHistory): void {
  const r = p.repetitionPenalty ?? 1;
  if (r !== 1) {
    const seen = new Set(h.prompt);
    for (const id of h.generated.keys()) seen.add(id);
    for (const id of seen) {
      const v = row[id]!;
      row[id] = v > 0 ? v / r : v * r;
    }
  }
  const freq = p.frequencyPenalty ?? 0;
  const pres = p.presencePenalty ?? 0;
  if (freq !== 0 || pres !== 0) {
    for (const [id, n] of h.generated) row[id] = row[id]! - freq * n - pres;
  }
}
