// The routers of the families beyond Qwen3's softmax-then-top-k (moe-ops.ts): gpt-oss's top-k then softmax,
// and DeepSeek-V3's group-limited sigmoid choice with its correction bias. Each writes a token's k expert
// ids and weights, and the scores its choice was made on (for near-tie reports).
import { topk } from './moe-ops.ts';

/**
 * gpt-oss: the top-k of the logits (descending, ties to the lower id), then softmax over those k
 * (float64 math). `logits` are the choice scores.
 */
export function topkSoftmax(ids: Int32Array, idOff: number, w: Float32Array, wOff: number, logits: Float32Array, off: number, n: number, k: number): void {
  topk(ids, idOff, w, wOff, logits, off, n, k, false);
  const max = w[wOff]!;
  let sum = 0;
  for (let j = 0; j < k; j++) sum += Math.exp(w[wOff + j]! - max);
  for (let j = 0; j < k; j++) w[wOff + j] = Math.exp(w[wOff + j]! - max) / sum;
}

export interface GroupRouter {
  readonly nGroup: number;
  readonly topkGroup: number;
  readonly scalingFactor: number;
  readonly normalize: boolean;
}

/**
 * DeepSeek-V3 (transformers DeepseekV3TopkRouter, float32): scores = sigmoid(logits); the choice is
 * scores + bias, kept only in the `topkGroup` groups whose best two sum highest (the other experts' choice
 * is 0, as transformers' masked_fill), top-k of that; weights = the unbiased scores of the k, over their sum
 * when `normalize`, x scalingFactor. Ids are written by descending weight (the order the references use).
 * `choice` ([n] at off) receives the masked choice scores; `groupScore` is scratch of nGroup floats.
 */
export function groupLimitedTopk(
  ids: Int32Array,
  idOff: number,
  w: Float32Array,
  wOff: number,
  choice: Float32Array,
  logits: Float32Array,
  off: number,
  n: number,
  k: number,
  bias: Float32Array,
  r: GroupRouter,
  groupScore: Float32Array,
): void {
  const per = n / r.nGroup;
  for (let e = 0; e < n; e++) {
    const score = Math.fround(1 / (1 + Math.exp(-logits[off + e]!)));
    choice[off + e] = score + bias[e]!;
  }
  for (let g = 0; g < r.nGroup; g++) {
    let a = -Infinity;
    let b = -Infinity;
    for (let e = g * per; e < (g + 1) * per; e++) {
      const v = choice[off + e]!;
      if (v > a) {
        b = a;
        a = v;
      } else if (v > b) b = v;
    }
    groupScore[g] = a + b;
  }
  // The best topkGroup groups (ties to the lower group); the rest are masked to 0.
  const keep = new Uint8Array(r.nGroup);
  for (let j = 0; j < r.topkGroup; j++) {
    let best = -1;
    for (let g = 0; g < r.nGroup; g++) if (!keep[g] && (best < 0 || groupScore[g]! > groupScore[best]!)) best = g;
    keep[best] = 1;
  }
  for (let e = 0; e < n; e++) if (!keep[(e / per) | 0]) choice[off + e] = 0;
  topk(ids, idOff, w, wOff, choice, off, n, k, false);
  // Weights from the unbiased scores, recomputed exactly as above.
  let sum = 0;
  for (let j = 0; j < k; j++) {
    w[wOff + j] = Math.fround(1 / (1 + Math.exp(-logits[off + ids[idOff + j]!]!)));
    sum += w[wOff + j]!;
  }
  const den = Math.fround(Math.fround(sum) + 1e-20);
  for (let j = 0; j < k; j++) {
    const v = r.normalize ? Math.fround(w[wOff + j]! / den) : w[wOff + j]!;
    w[wOff + j] = v * r.scalingFactor;
  }
  // Descending weight (insertion sort, stable: equal weights keep the choice order).
  for (let j = 1; j < k; j++) {
    const id = ids[idOff + j]!;
    const v = w[wOff + j]!;
    let i = j - 1;
    for (; i >= 0 && w[wOff + i]! < v; i--) {
      ids[idOff + i + 1] = ids[idOff + i]!;
      w[wOff + i + 1] = w[wOff + i]!;
    }
    ids[idOff + i + 1] = id;
    w[wOff + i + 1] = v;
  }
}
