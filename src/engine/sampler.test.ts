// The sampler: greedy is argmax, top-p draws only from the nucleus, temperature and seeds behave.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sampler, SamplerScratch } from './sampler.ts';
import { argmax } from '../backend/argmax.ts';

const scratch = new SamplerScratch(6);
const logits = Float32Array.from([1, 3, 2.5, -1, 3, 0]);

test('greedy picks the first largest logit and draws no random numbers', () => {
  assert.equal(argmax(logits, 0, 6), 1);
  assert.equal(new Sampler({ temperature: 0, topP: 0.1, seed: 3 }).sample(logits, 0, scratch), 1);
});

test('top-p draws only from the smallest set reaching the mass, in proportion', () => {
  // probs at T=1: ids 1 and 4 tie at the top (~0.34 each), then 2 (~0.21): topP 0.6 keeps exactly {1, 4}.
  const s = new Sampler({ temperature: 1, topP: 0.6, seed: 5 });
  const seen = new Map<number, number>();
  for (let i = 0; i < 2000; i++) {
    const t = s.sample(logits, 0, scratch);
    seen.set(t, (seen.get(t) ?? 0) + 1);
  }
  assert.deepEqual([...seen.keys()].sort(), [1, 4]);
  assert.ok(Math.abs(seen.get(1)! - 1000) < 150, `balanced: ${seen.get(1)}`);
});

test('full top-p (1) draws every token in proportion; a flat distribution takes the full-sort path', () => {
  const s = new Sampler({ temperature: 1, topP: 1, seed: 9 });
  const counts = new Array(6).fill(0);
  for (let i = 0; i < 6000; i++) counts[s.sample(logits, 0, scratch)]++;
  const z = [...logits].reduce((a, l) => a + Math.exp(l), 0);
  counts.forEach((c, i) => assert.ok(Math.abs(c / 6000 - Math.exp(logits[i]!) / z) < 0.03, `token ${i}: ${c}`));
  const wide = new SamplerScratch(1000);
  const flat = new Float32Array(1000).map((_, i) => -i * 0.02); // max/min prob ratio e^20 > 1e4: tail below the threshold
  const f = new Sampler({ temperature: 1, topP: 0.999999, seed: 1 });
  for (let i = 0; i < 200; i++) assert.ok(f.sample(flat, 0, wide) < 1000);
});

test('the same seed gives the same draws', () => {
  const draw = (seed: number): number[] => {
    const s = new Sampler({ temperature: 2, topP: 0.9, seed });
    return Array.from({ length: 30 }, () => s.sample(logits, 0, scratch));
  };
  assert.deepEqual(draw(4), draw(4));
  assert.notDeepEqual(draw(4), draw(5));
});

test('sampling refuses non-finite logits instead of drawing an undefined token', () => {
  const V = 8;
  const logits = new Float32Array(V).fill(0);
  logits[3] = Number.NaN;
  const s = new Sampler({ temperature: 0.8, topP: 0.9, seed: 1 });
  assert.throws(() => s.sample(logits, 0, new SamplerScratch(V)), /non-finite logits/);
  const all = new Sampler({ temperature: 0.8, topP: 1, seed: 1 });
  assert.throws(() => all.sample(logits, 0, new SamplerScratch(V)), /non-finite logits/);
});

test('top-k keeps only the k most likely, min-p drops tokens below p x the top one', () => {
  const k2 = new Sampler({ temperature: 1, topP: 1, topK: 2, seed: 4 });
  const seenK = new Set(Array.from({ length: 500 }, () => k2.sample(logits, 0, scratch)));
  assert.deepEqual([...seenK].sort(), [1, 4]);
  // p(2) / p(1) = e^-0.5 = 0.61: min-p 0.5 keeps {1, 2, 4}, 0.7 keeps {1, 4}.
  const m5 = new Sampler({ temperature: 1, topP: 1, minP: 0.5, seed: 4 });
  assert.deepEqual([...new Set(Array.from({ length: 800 }, () => m5.sample(logits, 0, scratch)))].sort(), [1, 2, 4]);
  const m7 = new Sampler({ temperature: 1, topP: 1, minP: 0.7, seed: 4 });
  assert.deepEqual([...new Set(Array.from({ length: 800 }, () => m7.sample(logits, 0, scratch)))].sort(), [1, 4]);
});

test('penalties change the choice, on a copy of the row; greedy without them is untouched', () => {
  const row = Float32Array.from(logits);
  // frequency: each generated id 1 costs 2 -> after one pick of 1, id 4 (also 3) wins.
  const f = new Sampler({ temperature: 0, topP: 1, frequencyPenalty: 2 });
  assert.deepEqual([f.sample(row, 0, scratch), f.sample(row, 0, scratch), f.sample(row, 0, scratch)], [1, 4, 2]);
  assert.deepEqual([...row], [...logits], 'the backend row is not written');
  // repetition over the prompt: ids 1 and 4 seen, 3 / 1.5 = 2 < 2.5 -> id 2.
  assert.equal(new Sampler({ temperature: 0, topP: 1, repetitionPenalty: 1.5 }, [1, 4]).sample(row, 0, scratch), 2);
  assert.equal(new Sampler({ temperature: 0, topP: 1, presencePenalty: 0 }).sample(row, 0, scratch), 1);
});

test('logprobs: the chosen token and the top alternatives under the raw logits', () => {
  const s = new Sampler({ temperature: 0, topP: 1, logprobs: 3 });
  assert.equal(s.sample(logits, 0, scratch), 1);
  const z = Math.log([...logits].reduce((a, l) => a + Math.exp(l), 0));
  assert.ok(Math.abs(s.last!.logprob - (3 - z)) < 1e-6);
  assert.deepEqual(s.last!.top.map((t) => t.id), [1, 4, 2]);
});

test('a constraint masks tokens, sees each choice, and ends the request when complete', () => {
  const chosen: number[] = [];
  const constraint = { mask(row: Float32Array, off: number, V: number) { for (let i = 0; i < V; i++) if (i !== 2 && i !== 5) row[off + i] = -Infinity; }, accept(id: number) { chosen.push(id); }, get complete() { return chosen.length >= 2; } };
  const s = new Sampler({ temperature: 1, topP: 1, seed: 3, constraint });
  const a = s.sample(logits, 0, scratch);
  assert.ok(a === 2 || a === 5);
  assert.equal(s.complete, false);
  s.sample(logits, 0, scratch);
  assert.equal(s.complete, true);
  const none = { mask(row: Float32Array) { row.fill(-Infinity); }, accept() {}, complete: false };
  assert.throws(() => new Sampler({ temperature: 0, topP: 1, constraint: none }).sample(logits, 0, scratch), /allows no token/);
});
