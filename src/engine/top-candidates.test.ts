// Sampling with top-k / top-p narrowed to the top buckets (top-candidates.ts) draws what sorting the whole row
// draws: the sampler against a spec that sorts every token, over flat, peaked, tied and truncated rows, for the
// same seeds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sampler, SamplerScratch, splitmix32 } from './sampler.ts';
import { TopScratch, topCandidates } from './top-candidates.ts';

interface Params { temperature: number; topP: number; topK?: number; minP?: number }

/** The draw as specified: probabilities, every candidate sorted (descending, ties lower id first), min-p, top-k, top-p. */
function specDraw(logits: Float32Array, p: Params, u01: number): number {
  const V = logits.length;
  let max = -Infinity;
  for (const l of logits) if (l > max) max = l;
  const probs = Float64Array.from(logits, (l) => Math.exp((l - max) / p.temperature));
  let sum = 0;
  let maxP = 0;
  for (const q of probs) {
    sum += q;
    if (q > maxP) maxP = q;
  }
  const topK = p.topK ?? 0, minP = p.minP ?? 0;
  const sorted = (ids: number[]): number[] => ids.sort((a, b) => probs[b]! - probs[a]! || a - b);
  const scan = (cand: number[], keep: number, u: number): number => {
    for (let i = 0; i < keep; i++) {
      u -= probs[cand[i]!]!;
      if (u < 0) return cand[i]!;
    }
    return cand[keep - 1]!;
  };
  if ((topK > 0 && topK < V) || minP > 0) {
    const cand = sorted([...probs.keys()].filter((i) => probs[i]! > 0 && probs[i]! >= minP * maxP));
    const k = topK > 0 ? Math.min(topK, cand.length) : cand.length;
    let total = 0;
    for (let i = 0; i < k; i++) total += probs[cand[i]!]!;
    let keep = k;
    if (p.topP < 1) {
      keep = 0;
      let kept = 0;
      while (keep < k && kept < p.topP * total) kept += probs[cand[keep++]!]!;
      total = kept;
    }
    return scan(cand, keep, u01 * total);
  }
  if (p.topP >= 1) {
    let u = u01 * sum, last = 0;
    for (let i = 0; i < V; i++) {
      if (probs[i]! > 0) last = i;
      u -= probs[i]!;
      if (u < 0) return i;
    }
    return last;
  }
  const cand = sorted([...probs.keys()]);
  let keep = 0, kept = 0;
  while (keep < V && kept < p.topP * sum) kept += probs[cand[keep++]!]!;
  return scan(cand, keep, u01 * kept);
}

test('top-k / top-p over the top buckets draw what sorting every token draws (flat, peaked, tied, quantized rows; many seeds)', () => {
  const V = 3000;
  const rnd = splitmix32(99);
  const rows: [string, Float32Array][] = [
    ['flat', Float32Array.from({ length: V }, () => (rnd() - 0.5) * 20)],
    ['peaked', Float32Array.from({ length: V }, (_, i) => (i % 97 === 0 ? 12 : 0) + (rnd() - 0.5) * 4)],
    ['tied (values on a coarse grid)', Float32Array.from({ length: V }, () => Math.round(rnd() * 8) / 2)],
    ['one dominant token', Float32Array.from({ length: V }, (_, i) => (i === 1234 ? 40 : rnd()))],
    ['very flat', Float32Array.from({ length: V }, () => rnd() * 1e-3)],
  ];
  const params: Params[] = [
    { temperature: 0.8, topP: 0.95 }, { temperature: 1.3, topP: 0.5 }, { temperature: 0.7, topP: 0.8, topK: 50 },
    { temperature: 1, topP: 1, topK: 7 }, { temperature: 0.6, topP: 0.9, topK: 2999 }, { temperature: 1, topP: 0.99, minP: 0.05 },
    { temperature: 0.5, topP: 1, topK: 1 }, { temperature: 2, topP: 0.3, topK: 400, minP: 0.01 },
  ];
  const s = new SamplerScratch(V);
  for (const [name, logits] of rows) {
    for (const p of params) {
      for (const seed of [1, 2, 3, 77]) {
        const sampler = new Sampler({ ...p, seed });
        const u = splitmix32(seed);
        for (let draw = 0; draw < 6; draw++) {
          assert.equal(sampler.sample(logits, 0, s), specDraw(logits, p, u()), `${name}, ${JSON.stringify(p)}, seed ${seed}, draw ${draw}`);
        }
      }
    }
  }
});

test('topCandidates: the fewest top buckets reaching the count and the mass, in id order; -1 when all of them do not', () => {
  const probs = Float64Array.from([0.5, 0.25, 0.5, 0.01, 0, 0.26, 0.125]);
  const order = new Int32Array(probs.length);
  const s = new TopScratch();
  // 0.5 (twice) is the top bucket; 0.26 and 0.25 the ones an octave down.
  assert.equal(topCandidates(probs, probs.length, 0.5, 0, 2, 0, order, s), 2);
  assert.deepEqual(Array.from(order.subarray(0, 2)), [0, 2]);
  const n = topCandidates(probs, probs.length, 0.5, 0, 3, 0, order, s);
  assert.ok(Array.from(order.subarray(0, n)).every((i) => probs[i]! >= 0.25) && n >= 3);
  assert.equal(topCandidates(probs, probs.length, 0.5, 0, 7, 0, order, s), -1, 'six tokens have a probability above 0');
  assert.equal(topCandidates(probs, probs.length, 0.5, 0.2, 5, 0, order, s), -1, 'the floor leaves four');
  const m = topCandidates(probs, probs.length, 0.5, 0, 1, 1.5, order, s);
  assert.ok(Array.from(order.subarray(0, m)).reduce((a, i) => a + probs[i]!, 0) >= 1.5);
});
