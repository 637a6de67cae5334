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

/** A step's output with `argmax` taken on the host from its logits, when the input asked for argmaxOnly. */
export function withHostArgmax(input: StepInput, out: StepOutput, vocabSize: number): StepOutput {
  if (input.argmaxOnly !== true) return out;
  const a = new Int32Array(input.chunks.length);
  for (let i = 0; i < a.length; i++) a[i] = argmax(out.logits, i * vocabSize, vocabSize);
  return { ...out, argmax: a };
}
