import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadTraces, FIXTURE_TRACES } from './traces/load.ts';
import { buildTraffic, parsePhases, splitDocuments } from './traffic.ts';
import { topHMap, traceCounts } from './fit.ts';
import { hotMaskOf, type Geometry } from './policies/policy.ts';
import { staticPolicy } from './policies/static.ts';
import { replay } from './replay.ts';
import { phaseMetrics } from './metrics.ts';

const set = loadTraces(FIXTURE_TRACES);
const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
const enCode = topHMap(traceCounts(['en', 'code_js', 'code_py'].map((d) => set.traces.get(d)!), g), g, 'tiny-moe');

describe('replay', () => {
  it("static map: the simulator's cold share equals a direct count over the trace", () => {
    for (const domain of ['de', 'ja']) {
      const trace = set.traces.get(domain)!;
      const hot = hotMaskOf(enCode);
      let cold = 0;
      for (let i = 0; i < trace.ids.length; i++) if (!hot[(Math.floor(i / g.topK) % g.layers) * g.experts + trace.ids[i]!]) cold++;
      // One user walking every document of the domain once: the same rows, in another order.
      const steps = buildTraffic(set, { phases: parsePhases(`${domain}:${trace.tokens}`, set), users: 1, seed: 3, countTmax: 256 });
      const r = replay(staticPolicy({ geometry: g, bootMap: enCode, steps }), steps);
      const simCold = r.cold.reduce((a, b) => a + b, 0);
      const simPicks = r.picks.reduce((a, b) => a + b, 0);
      assert.equal(simPicks, trace.ids.length);
      assert.equal(simCold, cold, `${domain}: simulated cold picks equal the direct count`);
      // The fixture README: an en+code map leaves ~6.3% of de and ~11.1% of ja picks cold.
      const share = cold / trace.ids.length;
      assert.ok(Math.abs(share - (domain === 'de' ? 0.063 : 0.111)) < 0.01, `${domain}: ${share}`);
    }
  });

  it('traffic: each step carries one token per user, phases in order, deterministic by seed', () => {
    const phases = parsePhases('en+code:50,de+ja:30', set);
    assert.deepEqual(phases[0]!.domains, ['en', 'code_js', 'code_py']);
    const a = buildTraffic(set, { phases, users: 4, seed: 1, countTmax: 256 });
    const b = buildTraffic(set, { phases, users: 4, seed: 1, countTmax: 256 });
    const c = buildTraffic(set, { phases, users: 4, seed: 2, countTmax: 256 });
    assert.equal(a.length, 80);
    assert.equal(a[49]!.phase, 0);
    assert.equal(a[50]!.phase, 1);
    assert.ok(a.every((s) => s.tokens === 4 && s.picks.length === 4 * 36 && s.counted));
    assert.deepEqual(a.map((s) => Array.from(s.picks)), b.map((s) => Array.from(s.picks)));
    assert.notDeepEqual(a.map((s) => Array.from(s.picks)), c.map((s) => Array.from(s.picks)));
    assert.throws(() => parsePhases('en:10,xx:5', set), /no trace 'xx'/);
    assert.throws(() => parsePhases('en', set), /must look like/);
  });

  it('splits documents into disjoint halves', () => {
    const de = set.traces.get('de')!;
    const a = splitDocuments(de, 'first');
    const b = splitDocuments(de, 'second');
    assert.equal(a.tokens + b.tokens, de.tokens);
    assert.deepEqual(Array.from(a.ids.subarray(0, 36)), Array.from(de.ids.subarray(0, 36)));
  });

  it('metrics: the static map stays high on de+ja after the shift, phases are reported in order', () => {
    const steps = buildTraffic(set, { phases: parsePhases('en+code:1000,de+ja:1000', set), users: 1, seed: 1, countTmax: 256 });
    const m = phaseMetrics(replay(staticPolicy({ geometry: g, bootMap: enCode, steps }), steps));
    assert.equal(m.length, 2);
    assert.ok(m[0]!.coldShare < 0.03 && m[1]!.coldShare > 0.07, `${m[0]!.coldShare} ${m[1]!.coldShare}`);
    assert.equal(m[1]!.firstStep, 1000);
  });
});
