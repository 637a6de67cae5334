// Picks the next token from a row of logits: greedy, or seeded temperature + top-k / min-p / top-p with a
// PRNG per request; penalties and a structured-output constraint first, on a copy of the row.
import { ResidencyError } from '../errors.ts';
import { randomInt } from 'node:crypto';
import { TokenHistory, applyPenalties, hasPenalties } from './logit-processors.ts';
import { logprobsOf } from './logprobs.ts';
import type { SamplingParams, TokenLogprob } from './types.ts';
import { argmax, argmaxFinite } from '../backend/argmax.ts';
import { TopScratch, byProbability, sortTop, topCandidates } from './top-candidates.ts';

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

/** A row of logits with a NaN or no finite largest value: greedy and sampled requests fail alike. */
export function nonFiniteLogits(): ResidencyError {
  return new ResidencyError('INTERNAL', 'the model produced non-finite logits: cannot sample (check the checkpoint and backend)');
}

/** Buffers shared by every sampler of one engine (sampling runs one row at a time). */
export class SamplerScratch {
  readonly probs: Float64Array;
  readonly order: Int32Array;
  /** The histogram that narrows top-k and top-p to the tokens that can be picked (top-candidates.ts). */
  readonly top = new TopScratch();
  /** The row after penalties and masking (the backend's logits are never written). */
  readonly work: Float32Array;
  constructor(readonly vocabSize: number) {
    this.probs = new Float64Array(vocabSize);
    this.order = new Int32Array(vocabSize);
    this.work = new Float32Array(vocabSize);
  }
}


type SamplerParams = Pick<SamplingParams, 'temperature' | 'topP' | 'seed'> &
  Partial<Pick<SamplingParams, 'topK' | 'minP' | 'presencePenalty' | 'frequencyPenalty' | 'repetitionPenalty' | 'logprobs' | 'constraint'>>;

export class Sampler {
  private readonly rand: (() => number) | null;
  /** Seen tokens, kept only when a penalty needs them. */
  private readonly history: TokenHistory | null;
  /** Penalties or a constraint: the row is copied and changed before choosing. */
  private readonly processed: boolean;
  /** The latest token's log-probabilities (with params.logprobs). */
  last: { readonly logprob: number; readonly top: readonly TokenLogprob[] } | undefined;

  constructor(private readonly params: SamplerParams, promptIds: readonly number[] = []) {
    // Greedy draws nothing; without a seed, a fresh one (the same seed always gives the same tokens).
    this.rand = params.temperature > 0 ? splitmix32(params.seed ?? randomInt(2 ** 32)) : null;
    this.history = hasPenalties(params) ? new TokenHistory(promptIds) : null;
    this.processed = this.history !== null || params.constraint !== undefined;
  }

  /**
   * Its pick is the logits' argmax and nothing else reads them (greedy: no penalty, constraint or logprobs): a
   * step may take the argmax on the device instead (StepInput.argmaxOnly): the same token, and no state to update.
   */
  get plainGreedy(): boolean {
    return this.rand === null && !this.processed && this.params.logprobs === undefined;
  }

  /** The constraint (if any) is satisfied: the request ends. */
  get complete(): boolean {
    return this.params.constraint?.complete ?? false;
  }

  /** The next token from logits[off..off+V). */
  sample(logits: Float32Array, off: number, s: SamplerScratch): number {
    const V = s.vocabSize;
    let row = logits;
    let at = off;
    if (this.processed) {
      row = s.work;
      at = 0;
      row.set(logits.subarray(off, off + V));
      if (this.history) applyPenalties(row, this.params, this.history);
      this.params.constraint?.mask(row, 0, V);
    }
    let token: number;
    if (this.rand === null) {
      token = argmaxFinite(row, at, V);
      if (token < 0) {
        // Every token masked by a constraint from finite logits is its dead end (reported below), not a broken model.
        if (!this.processed || argmaxFinite(logits, off, V) < 0) throw nonFiniteLogits();
        token = argmax(row, at, V);
      }
    } else {
      token = this.draw(row, at, s);
    }
    if (this.params.constraint && row[at + token] === -Infinity) {
      throw new ResidencyError('INTERNAL', 'the structured-output constraint allows no token here (a grammar dead end)');
    }
    if (this.params.logprobs !== undefined) this.last = logprobsOf(logits, off, V, token, this.params.logprobs);
    this.history?.add(token);
    this.params.constraint?.accept(token);
    return token;
  }

  private draw(logits: Float32Array, off: number, s: SamplerScratch): number {
    const V = s.vocabSize;
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
    if (!Number.isFinite(sum) || sum <= 0) throw nonFiniteLogits();
    const topK = this.params.topK ?? 0;
    const minP = this.params.minP ?? 0;
    if ((topK > 0 && topK < V) || minP > 0) return this.drawTruncated(probs, V, maxP, topK, minP, topP, s);
    if (topP >= 1) return drawInIdOrder(probs, V, this.rand!() * sum);
    return this.drawNucleus(probs, V, sum, topP, s, maxP);
  }

  /** min-p, then top-k, then top-p over what is left (vLLM's order), drawn in descending probability. */
  private drawTruncated(probs: Float64Array, V: number, maxP: number, topK: number, minP: number, topP: number, s: SamplerScratch): number {
    const floor = minP * maxP;
    const order = s.order;
    // Top-k: only the tokens of the top buckets holding k of them are sorted (their order is the full sort's prefix).
    let n = topK > 0 ? topCandidates(probs, V, maxP, floor, topK, 0, order, s.top) : -1;
    if (n >= 0) sortTop(order, probs, s.top);
    else {
      n = 0;
      for (let i = 0; i < V; i++) if (probs[i]! > 0 && probs[i]! >= floor) order[n++] = i;
      order.subarray(0, n).sort(byProbability(probs));
    }
    const cand = order.subarray(0, n);
    const k = topK > 0 ? Math.min(topK, n) : n;
    let total = 0;
    for (let i = 0; i < k; i++) total += probs[cand[i]!]!;
    let keep = k;
    if (topP < 1) {
      keep = 0;
      let kept = 0;
      while (keep < k && kept < topP * total) kept += probs[cand[keep++]!]!;
      total = kept;
    }
    let u = this.rand!() * total;
    for (let i = 0; i < keep; i++) {
      u -= probs[cand[i]!]!;
      if (u < 0) return cand[i]!;
    }
    return cand[keep - 1]!;
  }

  /**
   * Top-p: the smallest set of most likely tokens whose mass reaches topP, drawn from in descending
   * probability (ties: lower id first). Sorting only the tokens of the top buckets that hold topP of the mass
   * is exact (the nucleus is a prefix of them); when, summed in sorted order, they fall short, every token is sorted.
   */
  private drawNucleus(probs: Float64Array, V: number, sum: number, topP: number, s: SamplerScratch, maxP: number): number {
    const target = topP * sum;
    const order = s.order;
    let n = topCandidates(probs, V, maxP, 0, 1, target, order, s.top);
    let cand: Int32Array;
    let keep: number;
    let kept: number;
    for (;;) {
      const all = n < 0;
      if (all) {
        n = V;
        for (let i = 0; i < V; i++) order[i] = i;
      }
      cand = order.subarray(0, n);
      if (all) cand.sort(byProbability(probs));
      else sortTop(order, probs, s.top);
      keep = 0;
      kept = 0;
      while (keep < n && kept < target) kept += probs[cand[keep++]!]!;
      if (all || kept >= target) break;
      n = -1;
    }
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
