// The one greedy pick, as every backend and the sampler take it, and a step's argmax taken on the host.
import type { StepInput, StepOutput } from './backend.ts';

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

/**
 * argmax's pick of x[off..off+n) when the row can be picked from, else -1: a NaN anywhere, or no finite largest
 * value (+Infinity, or every value -Infinity). The sampler refuses such a row (its probabilities do not sum); a
 * greedy pick must too, or a broken model quietly answers token 0. One pass, as argmax.
 */
export function argmaxFinite(x: Float32Array, off: number, n: number): number {
  let best = -1;
  let bestV = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = x[off + i]!;
    if (v !== v) return -1; // NaN
    if (v > bestV) {
      bestV = v;
      best = i;
    }
  }
  return bestV === Infinity || best < 0 ? -1 : best;
}

/** A step's output with `argmax` (and `nonFinite`) taken on the host from its logits, when the input asked for argmaxOnly. */
export function withHostArgmax(input: StepInput, out: StepOutput, vocabSize: number): StepOutput {
  if (input.argmaxOnly !== true) return out;
  const a = new Int32Array(input.chunks.length);
  const bad = new Uint8Array(input.chunks.length);
  for (let i = 0; i < a.length; i++) {
    const pick = argmaxFinite(out.logits, i * vocabSize, vocabSize);
    bad[i] = pick < 0 ? 1 : 0;
    a[i] = pick < 0 ? argmax(out.logits, i * vocabSize, vocabSize) : pick;
  }
  return { ...out, argmax: a, nonFinite: bad };
}
