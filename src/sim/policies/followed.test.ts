import { test } from 'node:test';
import assert from 'node:assert/strict';
import { identityRowMap } from '../../residency/rowmap.ts';
import { loadTraces, FIXTURE_TRACES } from '../traces/load.ts';
import { buildTraffic, parsePhases } from '../traffic.ts';
import { topHMap, traceCounts } from '../fit.ts';
import { replay } from '../replay.ts';
import { runPolicyConformance } from './policy.case.test.ts';
import { followedPolicy } from './followed.ts';
import { lruPolicy } from './lru.ts';
import { policyFactory } from './registry.ts';
import type { Geometry } from './policy.ts';

runPolicyConformance('lru followed with background moves (4 copies in flight)', followedPolicy(lruPolicy({ insertsPerStep: 8 }), 4), { moves: true });
runPolicyConformance('lfru followed with background moves (1 copy in flight)', policyFactory('lfru', { copiesInFlight: 1 }), { moves: true });

test('followed: a miss is copied in over two steps, the banks holding the old map until it lands', () => {
  const g = { layers: 1, experts: 8, topK: 2, hotPerLayer: 4 };
  const policy = followedPolicy(lruPolicy({ insertsPerStep: 8 }), 2)({ geometry: g, bootMap: identityRowMap('t', 1, 8, 4), steps: [] });
  // Step 0 misses 4 and 5 (LRU wants them hot at once), then picks them again; the banks request both exchanges (two
  // copy slots), each copies in at boundary 0 and out at 1 and lands at 2.
  const landedAt: number[] = [];
  for (let i = 0; i < 4; i++) {
    const m = policy.afterStep({ index: i, phase: 0, tokens: 1, counted: true, picks: Uint16Array.from([4, 5]) });
    for (let k = 0; k < m.swaps; k++) landedAt.push(i);
    if (i < 2) assert.deepEqual([...policy.hot], [1, 1, 1, 1, 0, 0, 0, 0], `step ${i}: nothing landed yet`);
  }
  assert.deepEqual(landedAt, [2, 2]);
  assert.deepEqual([...policy.hot].slice(4, 6), [1, 1]);
});

test('followed: the banks trail the policy (more cold than moves at once), and with copies to spare come near it', () => {
  const set = loadTraces(FIXTURE_TRACES, { only: ['en', 'de', 'ja'] });
  const g: Geometry = { layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 };
  const bootMap = topHMap(traceCounts([set.traces.get('en')!], g), g, 'tiny-moe');
  const steps = buildTraffic(set, { phases: parsePhases('en:300,de+ja:900', set), users: 4, seed: 2, countTmax: 256 });
  const ctx = { geometry: g, bootMap, steps };
  const cold = (copies?: number) => {
    const r = replay(policyFactory('lru', copies === undefined ? {} : { copiesInFlight: copies })(ctx), steps);
    return r.cold.reduce((a, b) => a + b, 0) / r.picks.reduce((a, b) => a + b, 0);
  };
  assert.deepEqual([policyFactory('lru')(ctx).name, policyFactory('lru', { copiesInFlight: 4 })(ctx).name], ['lru', 'lru-bg4'], 'the tables tell the followed one from the instant one');
  const instant = cold(), one = cold(1), many = cold(64);
  assert.ok(one > instant, `1 copy in flight ${one} vs moves at once ${instant}`);
  assert.ok(many < one && many >= instant, `64 copies ${many} between moves at once ${instant} and 1 copy ${one}`);
});
