// The conformance suite every residency policy passes (each policy's test file calls runPolicyConformance).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { loadTraces, FIXTURE_TRACES } from '../traces/load.ts';
import { buildTraffic, parsePhases, type SimStep } from '../traffic.ts';
import { topHMap, traceCounts } from '../fit.ts';
import { replay } from '../replay.ts';
import type { Geometry, Policy, PolicyFactory, PolicyContext } from './policy.ts';

export interface ConformanceOptions {
  /** The policy starts from the boot map (false for the oracle, which starts at its first window). */
  readonly startsAtBoot?: boolean;
  /** The policy is expected to move experts on a domain shift. */
  readonly moves?: boolean;
}

let cached: { g: Geometry; ctx1: PolicyContext; ctx4: PolicyContext } | undefined;
function fixtureContexts() {
  if (cached) return cached;
  const set = loadTraces(FIXTURE_TRACES, { only: ['en', 'de', 'ja'] });
  const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
  const bootMap = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
  const phases = parsePhases('en:400,de+ja:600,en:200', set);
  const ctx = (users: number): PolicyContext => ({ geometry: g, bootMap, steps: buildTraffic(set, { phases, users, seed: 7, countTmax: 256 }) });
  cached = { g, ctx1: ctx(1), ctx4: ctx(4) };
  return cached;
}

interface Observed {
  hashes: string[];
  moves: Array<{ swaps: number; copies: number; refused: number }>;
  directCold: number[];
  checks: number;
}

/** Drives a policy step by step, checking the interface's guarantees at every step. */
function observe(policy: Policy, steps: readonly SimStep[]): Observed {
  const g = policy.geometry;
  const out: Observed = { hashes: [], moves: [], directCold: [], checks: 0 };
  const row = g.layers * g.topK;
  for (const step of steps) {
    const before = policy.hot.slice();
    let cold = 0;
    for (let t = 0; t < step.tokens; t++) for (let l = 0; l < g.layers; l++) for (let k = 0; k < g.topK; k++) {
      if (!before[l * g.experts + step.picks[t * row + l * g.topK + k]!]) cold++;
    }
    out.directCold.push(cold);
    const m = policy.afterStep(step);
    out.moves.push({ swaps: m.swaps, copies: m.copies, refused: m.refused });
    let entered = 0;
    for (let l = 0; l < g.layers; l++) {
      let n = 0;
      for (let e = 0; e < g.experts; e++) {
        const v = policy.hot[l * g.experts + e]!;
        assert.ok(v === 0 || v === 1, `step ${step.index}: hot mask holds ${v}`);
        n += v;
        if (v && !before[l * g.experts + e]) entered++;
      }
      assert.equal(n, g.hotPerLayer, `step ${step.index} layer ${l}: ${n} hot experts, expected ${g.hotPerLayer}`);
    }
    assert.equal(entered, m.swaps + m.copies, `step ${step.index}: ${entered} experts entered the hot bank but the policy reported ${m.swaps} swaps + ${m.copies} copies`);
    assert.ok(entered <= policy.movesPerStep, `step ${step.index}: ${entered} moves exceed the per-step budget ${policy.movesPerStep}`);
    out.hashes.push(createHash('sha1').update(policy.hot).digest('hex'));
    out.checks++;
  }
  return out;
}

export function runPolicyConformance(name: string, factory: PolicyFactory, opts: ConformanceOptions = {}): void {
  describe(`policy conformance: ${name}`, () => {
    for (const users of [1, 4]) {
      it(`keeps the hot set a partition of constant size, within budget, moves reported exactly (${users} user(s))`, () => {
        const { ctx1, ctx4 } = fixtureContexts();
        const ctx = users === 1 ? ctx1 : ctx4;
        const policy = factory(ctx);
        assert.equal(policy.geometry.hotPerLayer, 49);
        if (opts.startsAtBoot ?? true) {
          for (let l = 0; l < ctx.geometry.layers; l++) {
            const hot = [...ctx.bootMap.layers_map[l]!.hot].sort((a, b) => a - b);
            const mine = [];
            for (let e = 0; e < ctx.geometry.experts; e++) if (policy.hot[l * ctx.geometry.experts + e]) mine.push(e);
            assert.deepEqual(mine, hot, `layer ${l}: starts from the boot map`);
          }
        }
        const o = observe(policy, ctx.steps);
        assert.equal(o.checks, ctx.steps.length);
        const total = o.moves.reduce((n, m) => n + m.swaps + m.copies, 0);
        if (opts.moves === true) assert.ok(total > 0, 'expected moves after the shift to de+ja');
        if (opts.moves === false) assert.equal(total, 0, 'a frozen policy never moves');
      });
    }

    it('is deterministic: a fresh instance on the same stream gives the same hot sets and moves', () => {
      const { ctx4 } = fixtureContexts();
      const a = observe(factory(ctx4), ctx4.steps);
      const b = observe(factory(ctx4), ctx4.steps);
      assert.deepEqual(a.hashes, b.hashes);
      assert.deepEqual(a.moves, b.moves);
    });

    it('accounts cold share consistently: a pick is cold iff its expert is not hot at that step', () => {
      const { ctx1 } = fixtureContexts();
      const direct = observe(factory(ctx1), ctx1.steps).directCold;
      const r = replay(factory(ctx1), ctx1.steps);
      assert.deepEqual(Array.from(r.cold), direct);
      let moves = 0;
      for (let s = 0; s < r.steps; s++) {
        let layerSum = 0;
        for (let l = 0; l < r.layers; l++) layerSum += r.coldPerLayer[s * r.layers + l]!;
        assert.equal(layerSum, r.cold[s], `step ${s}: per-layer cold picks sum to the step's`);
        assert.ok(r.cold[s]! <= r.picks[s]!);
        moves += r.swaps[s]! + r.copies[s]!;
      }
      assert.ok(moves >= 0);
    });
  });
}
