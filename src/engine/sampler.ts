// Picks the next token from a row of logits: greedy, or seeded temperature + top-p with a PRNG per request.
import { ResidencyError } from '../errors.ts';
import { randomInt } from 'node:crypto';
import type { SamplingParams } from './types.ts';

/** splitmix32: small, fast, and good enough to draw tokens; one per request so batching never changes a draw. */
export function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
  };
}

/** Buffers shared by every sampler of one engine (sampling runs one row at a time). */
export class SamplerScratch {
  readonly probs: Float64Array;
  readonly order: Int32Array;
  constructor(readonly vocabSize: number) {
    this.probs = new Float64Array(vocabSize);
    this.order = new Int32Array(vocabSize);
  }
}

/** Index of the largest logit, the first on ties (as torch.argmax). */
export function greedy(logits: Float32Array, off: number, n: number): number {
  let best = 0;
  let bestV = logits[off]!;
  for (let i = 1; i < n; i++) {
    const v = logits[off + i]!;
    if (v > bestV) {
      bestV = v;
      best = i;
    }
  }
  return best;
}

export class Sampler {
  private readonly rand: (() => number) | null;

  constructor(private readonly params: Pick<SamplingParams, 'temperature' | 'topP' | 'seed'>) {
    // Greedy draws nothing; without a seed, a fresh one (the same seed always gives the same tokens).
    this.rand = params.temperature > 0 ? splitmix32(params.seed ?? randomInt(2 ** 32)) : null;
  }

  /** The next token from logits[off..off+V). */
  sample(logits: Float32Array, off: number, s: SamplerScratch): number {
    const V = s.vocabSize;
    if (this.rand === null) return greedy(logits, off, V);
    const { temperature, topP } = this.params;
    const probs = s.probs;
    let max = -Infinity;
    for (let i = 0; i < V; i++) if (logits[off + i]! > max) max = logits[off + i]!;
    let sum = 0;
    let maxP = 0;
    for (let i = 0; i < V; i++) {
      const p = Math.exp((logits[off + i]! - max) / temperature);
      probs[i] = p;
      sum += p;
      if (p > maxP) maxP = p;
    }
    // NaN or infinite logits (a broken checkpoint or kernel) would draw an arbitrary or undefined token.
    if (!Number.isFinite(sum) || sum <= 0) {
      throw new ResidencyError('INTERNAL', 'the model produced non-finite logits: cannot sample (check the checkpoint and backend)');
    }
    if (topP >= 1) return drawInIdOrder(probs, V, this.rand() * sum);
    return this.drawNucleus(probs, V, sum, maxP, topP, s.order);
  }

  /**
   * Top-p: the smallest set of most likely tokens whose mass reaches topP, drawn from in descending
   * probability (ties: lower id first). Sorting only the tokens above a threshold is exact whenever
   * those tokens already hold topP of the mass (the nucleus is then among them); else sort everything.
   */
  private drawNucleus(probs: Float64Array, V: number, sum: number, maxP: number, topP: number, order: Int32Array): number {
    const target = topP * sum;
    let n = 0;
    let mass = 0;
    const threshold = maxP * 1e-4;
    for (let i = 0; i < V; i++) {
      if (probs[i]! >= threshold) {
        order[n++] = i;
        mass += probs[i]!;
      }
    }
    if (mass < target) {
      n = V;
      for (let i = 0; i < V; i++) order[i] = i;
    }
    const cand = order.subarray(0, n);
    cand.sort((a, b) => probs[b]! - probs[a]! || a - b);
    let keep = 0;
    let kept = 0;
    while (keep < n && kept < target) kept += probs[cand[keep++]!]!;
    let u = this.rand!() * kept;
    for (let i = 0; i < keep; i++) {
      u -= probs[cand[i]!]!;
      if (u < 0) return cand[i]!;
    }
    return cand[keep - 1]!;
  }
}

function drawInIdOrder(probs: Float64Array, V: number, u: number): number {
  let last = 0;
  for (let i = 0; i < V; i++) {
    if (probs[i]! > 0) last = i;
    u -= probs[i]!;
    if (u < 0) return i;
  }
  return last;
}
