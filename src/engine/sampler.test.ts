// The sampler: greedy is argmax, top-p draws only from the nucleus, temperature and seeds behave.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sampler, SamplerScratch, greedy } from './sampler.ts';

const scratch = new SamplerScratch(6);
const logits = Float32Array.from([1, 3, 2.5, -1, 3, 0]);

test('greedy picks the first largest logit and draws no random numbers', () => {
  assert.equal(greedy(logits, 0, 6), 1);
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
