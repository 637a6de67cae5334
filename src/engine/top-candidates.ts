// The most likely tokens of a row without sorting the whole vocabulary: top-k and top-p need only a prefix of the
// tokens in descending probability (ties: lower id first), and sorting the upper set of probabilities that holds
// that prefix gives exactly the full sort's prefix. The upper set comes from a histogram of the probabilities'
// float64 bit patterns (exponent and three mantissa bits, 8 buckets an octave, counted down from the largest):
// positive doubles order as their bits do, so a bucket index never increases with the probability and equal
// probabilities share a bucket. Two passes over the row and the set sorted a bucket at a time, instead of a
// comparator sort of up to the whole row, slow at a large vocabulary with flat logits (docs/results.md,
// "Sampling, loading, server").

const BUCKETS = 512;

/** The histogram's buffers (one per engine, as SamplerScratch's). */
export class TopScratch {
  readonly counts = new Int32Array(BUCKETS);
  readonly masses = new Float64Array(BUCKETS);
  /** The last topCandidates' buckets: each one's first position in its order, and how many buckets. */
  readonly starts = new Int32Array(BUCKETS + 1);
  readonly next = new Int32Array(BUCKETS);
  buckets = 0;
}

/** Bucket of a positive double's high word `hi` below the largest one's key `top`: 0 for the largest. */
function bucketOf(hi: number, top: number): number {
  const d = top - (hi >>> 17);
  return d < BUCKETS - 1 ? d : BUCKETS - 1;
}

/**
 * Writes into `order` the ids of the tokens whose probability is in the top buckets, the fewest buckets whose
 * count reaches `minCount` and mass reaches `minMass` (only tokens with probs > 0 and >= floor count), in id
 * bucket order (ids ascending within one: sortTop finishes the sort), and returns how many; or -1 when every bucket together does not reach them (the caller sorts all).
 * `maxP` is the row's largest probability.
 */
export function topCandidates(probs: Float64Array, n: number, maxP: number, floor: number, minCount: number, minMass: number, order: Int32Array, s: TopScratch): number {
  const hi = new Uint32Array(probs.buffer, probs.byteOffset, 2 * n);
  const top = (new Uint32Array(Float64Array.of(maxP).buffer)[1]!) >>> 17;
  const { counts, masses } = s;
  counts.fill(0);
  masses.fill(0);
  for (let i = 0; i < n; i++) {
    const p = probs[i]!;
    if (!(p > 0 && p >= floor)) continue;
    const b = bucketOf(hi[2 * i + 1]!, top);
    counts[b]!++;
    masses[b] += p;
  }
  let last = -1;
  let count = 0;
  let mass = 0;
  for (let b = 0; b < BUCKETS; b++) {
    count += counts[b]!;
    mass += masses[b]!;
    if (count >= minCount && mass >= minMass) {
      last = b;
      break;
    }
  }
  if (last < 0) return -1;
  // Grouped by bucket (a counting sort: bucket order is descending probability), ids ascending within each.
  const at = s.starts;
  let m = 0;
  for (let b = 0; b <= last; b++) {
    at[b] = m;
    m += counts[b]!;
  }
  at[last + 1] = m;
  s.buckets = last + 1;
  const next = s.next;
  next.set(at.subarray(0, last + 1));
  for (let i = 0; i < n; i++) {
    const p = probs[i]!;
    if (!(p > 0 && p >= floor)) continue;
    const b = bucketOf(hi[2 * i + 1]!, top);
    if (b <= last) order[next[b]!++] = i;
  }
  return m;
}

/** The sampler's order of token ids: descending probability, ties lower id first. */
export function byProbability(probs: Float64Array): (a: number, b: number) => number {
  return (a, b) => probs[b]! - probs[a]! || a - b;
}

/**
 * Sorts topCandidates' ids (descending probability, ties lower id first), one bucket at a time: the buckets are
 * already in that order, so the whole is the full sort's prefix.
 */
export function sortTop(order: Int32Array, probs: Float64Array, s: TopScratch): void {
  const cmp = byProbability(probs);
  for (let b = 0; b < s.buckets; b++) {
    const lo = s.starts[b]!, hi = s.starts[b + 1]!;
    if (hi - lo > 1) order.subarray(lo, hi).sort(cmp);
  }
}
