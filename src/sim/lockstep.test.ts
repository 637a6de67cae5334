// Lockstep: the engine-side residency path (ResidencyDriver over a backend) and the simulator make the same
// decisions on the same picks: the same swaps, at the same steps, in the same order.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend } from '../backend/cpu/cpu-backend.ts';
import { ResidencyDriver } from '../engine/residency-driver.ts';
import { argmax } from '../backend/argmax.ts';
import { loadModel } from '../model/load.ts';
import type { Backend, StepInput, StepOutput } from '../backend/backend.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Budgets } from '../residency/policy.ts';
import type { RowMap } from '../residency/rowmap.ts';
import { loadTraces, FIXTURE_TRACES } from './traces/load.ts';
import { openTraceFile } from './traces/recorder.ts';
import { buildTraffic, parsePhases, recordedSteps, type SimStep } from './traffic.ts';
import { topHMap, traceCounts } from './fit.ts';
import { adaptivePolicy, type AdaptiveOptions } from './policies/adaptive.ts';
import { PipelineBanks, TableBanks, type LoggedExchange } from './model-banks.ts';
import type { Geometry } from './policies/policy.ts';
import { replay } from './replay.ts';
import { TINY_MOE_MODEL, tinyMoeFile } from '../../fixtures/fixture-paths.ts';
import { DirectSequences } from '../backend/sequences.ts';

type Swapped = LoggedExchange;

/** A backend whose forward only feeds its counter with the picks it is handed (the step's trace rows). */
class TraceBackend implements Backend {
  readonly name = 'trace';
  readonly spec: ModelSpec;
  readonly banks: TableBanks;
  private readonly counter: Uint32Array;
  next: SimStep | null = null;
  constructor(private readonly g: Geometry, map: RowMap, banks: TableBanks = new TableBanks(map)) {
    this.spec = { name: map.model, numLayers: g.layers, numExperts: g.experts, topK: g.topK } as unknown as ModelSpec;
    this.banks = banks;
    this.counter = new Uint32Array(g.layers * g.experts);
  }
  readonly kvCache = { blockSize: 16, numBlocks: 4096, dtype: 'float32' as const, bytesPerBlock: 0 };
  copyBlocks(): void {}
  forward(input: StepInput): StepOutput {
    const s = this.next!;
    if (input.count) {
      for (let i = 0; i < s.picks.length; i++) {
        const l = Math.floor(i / this.g.topK) % this.g.layers;
        this.counter[l * this.g.experts + s.picks[i]!]!++;
      }
    }
    return { logits: new Float32Array(0) };
  }
  readCounter(): Uint32Array { return this.counter.slice(); }
  dispose(): void {}
}

/** The simulator's decisions: (step, layer, hot row, cold row) of every applied swap. */
function simulated(g: Geometry, boot: RowMap, steps: readonly SimStep[], budgets: Partial<Budgets>, opts: AdaptiveOptions = {}) {
  const policy = adaptivePolicy(budgets, 'adaptive', opts)({ geometry: g, bootMap: boot, steps });
  replay(policy, steps);
  const swaps: Swapped[] = policy.log.map(({ step, swap }) => [step, swap.layer, swap.hotRow, swap.coldRow]);
  return { swaps, map: policy.controller.map(), controller: policy.controller };
}

/** Beyond the swaps: the same counts were drained (so the same picks were counted) and the same stats kept. */
function sameState(engine: { stats: object; dumpCounts(): { cumulative: unknown; decayed: unknown; decode_steps: number } }, sim: typeof engine): void {
  assert.deepEqual(engine.stats, sim.stats);
  const a = engine.dumpCounts();
  const b = sim.dumpCounts();
  assert.equal(a.decode_steps, b.decode_steps);
  assert.deepEqual(a.cumulative, b.cumulative);
  assert.deepEqual(a.decayed, b.decayed);
}

describe('lockstep: engine-side driver vs simulator', () => {
  it('makes identical decisions on fixture traffic (fake backend fed from the same picks)', async () => {
    const set = loadTraces(FIXTURE_TRACES, { only: ['en', 'de', 'ja'] });
    const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
    const boot = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
    // Two users and 300-token steps mixed in: uncounted steps must be skipped the same way on both sides.
    const steps = buildTraffic(set, { phases: parsePhases('en:500,de+ja:1500', set), users: 2, seed: 5, countTmax: 256 }).map((s) => {
      if (s.index % 97 !== 50) return s;
      const picks = new Uint16Array(s.picks.length * 150);
      for (let k = 0; k < 150; k++) picks.set(s.picks, k * s.picks.length);
      return { ...s, tokens: 300, counted: false, picks }; // a prefill-sized step: not counted on either side
    });
    const budgets: Partial<Budgets> = { drain_every: 32, swaps_per_step: 2 };
    const sim = simulated(g, boot, steps, budgets);
    assert.ok(sim.swaps.length > 20, `the shift should cause swaps (got ${sim.swaps.length})`);
    if (process.env.LOCKSTEP_VERBOSE) console.error(`fixture lockstep: ${steps.length} steps, ${sim.swaps.length} swaps`);

    const backend = new TraceBackend(g, boot);
    const driver = new ResidencyDriver({ backend, budgets, frozen: false, log: () => {} });
    for (const s of steps) {
      backend.next = s;
      const count = driver.countStep(s.tokens);
      backend.forward({ chunks: [], count });
      backend.banks.step = s.index;
      driver.afterStep({ step: s.index, tokens: s.tokens, counted: count, durationNs: 0 });
    }
    assert.deepEqual(backend.banks.log, sim.swaps);
    assert.deepEqual(driver.controller.map(), sim.map);
    sameState(driver.controller, sim.controller);
    assert.equal(driver.controller.stats.refused, 0);
  });

  it('makes identical decisions with moves in the background (the CUDA banks\' schedule on both sides)', () => {
    const set = loadTraces(FIXTURE_TRACES, { only: ['en', 'de', 'ja'] });
    const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
    const boot = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
    const steps = buildTraffic(set, { phases: parsePhases('en:300,de+ja:900', set), users: 4, seed: 3, countTmax: 256 });
    // One copy in flight: the banks are slower than the policy, so queued swaps wait and are decided again.
    const budgets: Partial<Budgets> = { drain_every: 4, min_average: 2, swaps_per_layer_per_drain: 4 };
    const sim = simulated(g, boot, steps, budgets, { copiesInFlight: 1 });
    assert.ok(sim.swaps.length > 20 && sim.controller.stats.superseded > 0, `swaps ${sim.swaps.length}, superseded ${sim.controller.stats.superseded}`);
    const banks = new PipelineBanks(boot, 1);
    const backend = new TraceBackend(g, boot, banks);
    const driver = new ResidencyDriver({ backend, budgets, frozen: false, log: () => {} });
    for (const s of steps) {
      backend.next = s;
      const count = driver.countStep(s.tokens);
      backend.forward({ chunks: [], count });
      banks.step = s.index;
      driver.afterStep({ step: s.index, tokens: s.tokens, counted: count, durationNs: 0 });
    }
    assert.deepEqual(banks.log, sim.swaps);
    assert.deepEqual(driver.controller.map(), sim.map);
    sameState(driver.controller, sim.controller);
  });

  it('makes identical decisions on routing recorded from the real CPU backend', async () => {
    const model = await loadModel(TINY_MOE_MODEL, { name: 'tiny-moe' });
    const spec = model.spec;
    const g: Geometry = { layers: spec.numLayers, experts: spec.numExperts, topK: spec.topK, hotPerLayer: 49 };
    const set = loadTraces(FIXTURE_TRACES, { only: ['en'] });
    const boot = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
    const backend = createCpuBackend(spec, model.weights, { placement: boot });
    const budgets: Partial<Budgets> = { drain_every: 4, swaps_per_step: 2, min_average: 0.5, half_life_tokens: 50 };
    const driver = new ResidencyDriver({ backend, budgets, frozen: false, log: () => {} });
    const engineSwaps: Swapped[] = [];
    let stepNow = 0;
    const swapRows = backend.banks.swapRows.bind(backend.banks);
    backend.banks.swapRows = (layer: number, hotRow: number, coldRow: number) => { engineSwaps.push([stepNow, layer, hotRow, coldRow]); swapRows(layer, hotRow, coldRow); };

    // Three concurrent requests from the parity set (German, Japanese, English): each prefills, then decodes.
    const parity = JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: { domain: string; prompt_ids: number[] }[] };
    const prompts = ['de', 'ja', 'en'].map((d) => parity.cases.find((c) => c.domain === d)!.prompt_ids);
    const file = join(mkdtempSync(join(tmpdir(), 'lockstep-')), 'cpu.jsonl');
    const { recorder, close } = openTraceFile(file, { layers: g.layers, experts: g.experts, topK: g.topK }, 'lockstep test');
    const seqs = prompts.map((p, i) => ({ seq: i, next: [...p], pos: 0 }));
    const direct = new DirectSequences(backend);
    for (const s of seqs) direct.open(s.seq, 256);
    for (stepNow = 0; stepNow < 40; stepNow++) {
      const chunks = seqs.map((s) => ({ seq: s.seq, tokens: s.next, startPos: s.pos }));
      const tokens = chunks.reduce((n, c) => n + c.tokens.length, 0);
      const count = driver.countStep(tokens);
      const out = direct.forward({ chunks, count, recordRouting: true });
      recorder.recordStep(chunks.map((c) => ({ seq: c.seq, startPos: c.startPos, tokens: c.tokens.length })), out.routing!);
      seqs.forEach((s, i) => { s.pos += s.next.length; s.next = [argmax(out.logits, i * spec.vocabSize, spec.vocabSize)]; });
      driver.afterStep({ step: stepNow, tokens, counted: count, durationNs: 0 });
    }
    close();

    const trace = loadTraces(file).traces.get('cpu')!;
    const steps = recordedSteps(trace, budgets.count_tmax ?? 256);
    assert.equal(steps.length, 40);
    const sim = simulated(g, boot, steps, budgets);
    assert.ok(sim.swaps.length > 0, "the recorded traffic should cause swaps");
    if (process.env.LOCKSTEP_VERBOSE) console.error(`cpu lockstep: ${steps.length} steps, ${trace.tokens} tokens, ${sim.swaps.length} swaps`);
    assert.deepEqual(engineSwaps, sim.swaps);
    assert.deepEqual(driver.controller.map(), sim.map);
    sameState(driver.controller, sim.controller);
  });
});
