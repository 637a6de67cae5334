// bench:tiered's harness on the CPU backend (tiny-moe, real text): every policy sees the same tokens and
// the same routing (placement never changes a pick), all hot reads nothing cold, the hindsight map per phase
// leaves less cold than the fixed map after the shift, and every lane's moves go through the product's banks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { loadModel } from '../../src/model/load.ts';
import { loadTokenizer } from '../../src/model/tokenizer.ts';
import { topHMap } from '../../src/sim/fit.ts';
import { lruPolicy } from '../../src/sim/policies/lru.ts';
import { runPolicy } from '../../bench/tiered/run-policy.ts';
import { loadDocs, parsePhases } from '../../bench/tiered/traffic.ts';
import { TINY_MOE_MODEL as dir, tinyMoeFile } from '../../fixtures/fixture-paths.ts';

const prompts = tinyMoeFile('prompts.json.gz');

test('bench:tiered harness: same routing for every policy, all hot never cold, hindsight beats fixed after the shift', async () => {
  const m = await loadModel(dir);
  const tok = await loadTokenizer(dir);
  const { walk } = loadDocs(prompts, tok, 64);
  const phases = parsePhases('en+code:120,de+ja:120', walk);
  const H = 40;
  const g = { layers: m.spec.numLayers, experts: m.spec.numExperts, hotPerLayer: H, topK: m.spec.topK };
  const all = new CpuBackend(m.spec, m.weights, {});
  const ref = runPolicy(all, { name: 'all-hot', kind: 'static' }, phases, walk, 2);
  all.dispose();
  assert.equal(ref.cold.reduce((a, b) => a + b, 0), 0, 'all hot: nothing is read cold');
  const fixedMap = topHMap(ref.phaseCounts[0]!, g, m.spec.name);
  const be = new CpuBackend(m.spec, m.weights, { placement: fixedMap });
  const lanes = [
    runPolicy(be, { name: 'fixed', kind: 'static', map: fixedMap }, phases, walk, 2),
    runPolicy(be, { name: 'adaptive', kind: 'adaptive', map: fixedMap, budgets: { drain_every: 8, half_life_tokens: 40, min_average: 1 } }, phases, walk, 2),
    runPolicy(be, { name: 'lru', kind: 'follow', map: fixedMap, make: (boot) => lruPolicy({ insertsPerStep: 8 })({ geometry: g, bootMap: boot, steps: [] }) }, phases, walk, 2),
    runPolicy(be, { name: 'oracle-phase', kind: 'phase-maps', maps: ref.phaseCounts.map((c) => topHMap(c, g, m.spec.name)) }, phases, walk, 2),
  ];
  be.dispose();
  for (const r of lanes) {
    r.phaseCounts.forEach((c, p) => assert.deepEqual(c, ref.phaseCounts[p], `${r.policy}: phase ${p} routed differently`));
  }
  const cold = (r: (typeof lanes)[number], p: number): number => {
    let c = 0, n = 0;
    for (let s = 0; s < r.steps; s++) if (r.phase[s] === p) { c += r.cold[s]!; n += r.picks[s]!; }
    return c / n;
  };
  const [fixed, adaptive, lru, oracle] = lanes;
  assert.ok(cold(oracle!, 1) < cold(fixed!, 1), `hindsight ${cold(oracle!, 1)} vs fixed ${cold(fixed!, 1)} on the shifted phase`);
  assert.equal(fixed!.landed, 0);
  assert.ok(adaptive!.landed > 0 && lru!.landed > 0, 'adaptive and LRU moved experts through the banks');
});
