// Round trip on the real CPU backend and the tiny-moe fixture: thousands of swaps under alternating domain
// traffic, then restore: bank bytes identical to boot and greedy outputs identical to before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { Backend } from '../backend/backend.ts';
import { createCpuBackend, type CpuBackend } from '../backend/cpu/cpu-backend.ts';
import { loadModel } from '../model/load.ts';
import { Counter } from '../residency/counts.ts';
import { rowMapsEqual } from '../residency/rowmap.ts';
import { mapFromBanks } from '../backend/bank-map.ts';
import { ResidencyDriver } from './residency-driver.ts';
import { argmax } from '../backend/argmax.ts';
import { TINY_MOE_MODEL, tinyMoeFile, tinyMoeTrace } from '../../fixtures/fixture-paths.ts';
import { DirectSequences } from '../backend/sequences.ts';

const model = await loadModel(TINY_MOE_MODEL);
const { spec } = model;
const parity = JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: { domain: string; prompt_ids: number[] }[] };
const prompts = ['en', 'ja', 'code_py'].map((d) => parity.cases.find((c) => c.domain === d)!.prompt_ids);
const traces = Object.fromEntries(['en', 'ja', 'de', 'code_js'].map((d) => [d, tinyMoeTrace(d)]));

/** Greedy decode of each prompt, `steps` tokens, one sequence at a time. */
function greedy(backend: CpuBackend, steps: number): number[][] {
  const seqs = new DirectSequences(backend);
  return prompts.map((ids, seq) => {
    seqs.open(seq, ids.length + steps);
    const out: number[] = [];
    let chunk = { seq, tokens: ids, startPos: 0 };
    for (let i = 0; i < steps; i++) {
      const { logits } = seqs.forward({ chunks: [chunk], count: false });
      const best = argmax(logits, 0, spec.vocabSize);
      out.push(best);
      chunk = { seq, tokens: [best], startPos: chunk.startPos + chunk.tokens.length };
    }
    seqs.close(seq);
    return out;
  });
}

test('thousands of swaps under alternating domains, then restore: boot digest and greedy outputs come back', (t) => {
  const backend = createCpuBackend(spec, model.weights, { placement: { hotPerLayer: 49 } });
  const bootDigest = backend.banks.digest();
  const before = greedy(backend, 8);

  // Counts driven synthetically from the fixture traces (4 tokens per step) so the test stays CI-fast; the
  // banks are the real CPU banks, every swap moves real expert bytes.
  const counter = new Counter(spec.numLayers, spec.numExperts, spec.topK);
  const traffic: Backend = { ...backendShape(backend), readCounter: () => counter.snapshot() };
  const driver = new ResidencyDriver({
    backend: traffic, frozen: false, log: () => {},
    budgets: { drain_every: 4, half_life_tokens: 40, min_average: 2, hysteresis: 1.2, move_cost_picks: 0, swaps_per_layer_per_drain: 4, swaps_per_step: 8 },
  });
  const domains = ['en', 'ja', 'de', 'code_js'];
  const row = spec.numLayers * spec.topK;
  let step = 0;
  for (let phase = 0; phase < 24; phase++) {
    const bytes = traces[domains[phase % domains.length]!]!;
    for (let i = 0; i < 250; i++, step++) {
      const at = ((phase * 1000 + i * 4) * row) % (bytes.length - 4 * row);
      const counted = driver.countStep(4);
      if (counted) counter.addPicks(bytes.subarray(at, at + 4 * row), 4);
      driver.afterStep({ step, tokens: 4, counted, durationNs: 0 });
    }
  }
  const swaps = driver.controller.stats.applied;
  assert.ok(swaps >= 2000, `only ${swaps} swaps`);
  assert.equal(driver.controller.stats.refused, 0);
  assert.ok(rowMapsEqual(mapFromBanks(backend.banks, spec.name), driver.controller.map()));
  assert.notEqual(backend.banks.digest(), bootDigest);
  assert.deepEqual(greedy(backend, 8), before, 'placement never changes a result');

  const restore = driver.control({ restore_map: true });
  assert.ok(restore.ok);
  t.diagnostic(`${swaps} swaps applied; ${restore.changes.join('; ')}`);
  while (driver.controller.queueDepth > 0) driver.afterStep({ step: step++, tokens: 1, counted: false, durationNs: 0 });
  assert.ok(driver.ring.dump().swaps.every((n) => n <= 8), 'restore obeys the per-step budget');
  assert.equal(backend.banks.digest(), bootDigest, 'bank bytes identical to boot');
  assert.deepEqual(greedy(backend, 8), before, 'greedy outputs identical to before');
});

test('live: the CPU backend counts in its MoE op and the driver drains real picks', () => {
  const backend = createCpuBackend(spec, model.weights, { placement: { hotPerLayer: 49 } });
  const driver = new ResidencyDriver({ backend, frozen: false, log: () => {}, budgets: { drain_every: 4, min_average: 0.5, move_cost_picks: 0 } });
  const ids = prompts[1]!;
  const seqs = new DirectSequences(backend);
  seqs.open(0, ids.length + 24);
  let chunk = { seq: 0, tokens: ids, startPos: 0 };
  let countedSteps = 0;
  for (let step = 0; step < 24; step++) {
    const counted = driver.countStep(chunk.tokens.length); // count
    if (counted) countedSteps++;
    const { logits } = seqs.forward({ chunks: [chunk], count: counted });
    driver.afterStep({ step, tokens: chunk.tokens.length, counted, durationNs: 0 }); // drain, decide, swap
    chunk = { seq: 0, tokens: [argmax(logits, 0, spec.vocabSize)], startPos: chunk.startPos + chunk.tokens.length };
  }
  const picks = backend.readCounter().reduce((a, b) => a + b, 0);
  // The prompt step (48 tokens <= count_tmax) counts every prompt token; each decode step one token.
  const expectedTokens = ids.length + (countedSteps - 1);
  assert.equal(picks, expectedTokens * spec.numLayers * spec.topK);
  assert.ok(driver.lastDrain && driver.lastDrain.picks > 0);
  assert.ok(driver.controller.stats.drains >= 5);
});

/** The Backend fields the driver uses, bound to the real backend. */
function backendShape(b: CpuBackend): Omit<Backend, 'readCounter'> {
  return {
    name: b.name, spec: b.spec, banks: b.banks,
    kvCache: b.kvCache, copyBlocks: (p) => b.copyBlocks(p),
    forward: (i) => b.forward(i), dispose: () => b.dispose(),
  };
}
