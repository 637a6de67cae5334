// Thousands of Controller-driven swaps on the CUDA backend (49 of 64 hot, the cold bank in mapped host
// memory), then restore_map: the bank digest returns to boot and greedy output never changes (churn.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModel } from '../../src/model/load.ts';
import { parityCases, runChurn } from './churn.ts';
import { fixtureDir, modelDir } from './harness.ts';
import { report } from './model.gpu.ts';

test('CUDA 49/64 hot: >= 2000 Controller swaps, generation before/mid/during/after == all-hot, restore_map returns the boot digest', async () => {
  const m = await loadModel(modelDir());
  const r = await runChurn('cuda', m, parityCases(fixtureDir()), { hot: 49, target: 2400, tokens: 40 });
  report['churn'] = r;
  const total = r.swapsByController + r.swapsManual + r.swapsRestore;
  console.log(`# churn: ${total} swaps (controller ${r.swapsByController}, manual ${r.swapsManual}, restore ${r.swapsRestore} = lower bound ${r.restoreLowerBound}), ${r.drains} drains, ${r.refused} refused, ${r.midwayMoved} experts moved at mid-way`);
  console.log(`# churn: digest boot ${r.digestBoot.slice(0, 16)} mid ${r.digestMid.slice(0, 16)} after ${r.digestAfter.slice(0, 16)}; token mismatches ${JSON.stringify(r.mismatches)}, all-hot vs parity.json ${r.allHotVsReference}`);
  assert.ok(total >= 2000, `only ${total} swaps`);
  assert.equal(r.mapDisagreements, 0, 'banks and Controller map agree row by row');
  assert.ok(r.mapRestored, 'controller map back to boot');
  assert.equal(r.swapsRestore, r.restoreLowerBound, 'restore used the minimal number of exchanges');
  assert.notEqual(r.digestMid, r.digestBoot, 'the churn did move rows');
  assert.equal(r.digestAfter, r.digestBoot, 'bank digest restored');
  assert.equal(r.allHotVsReference, 0, 'all-hot CUDA greedy == parity.json tokens');
  for (const [k, v] of Object.entries(r.mismatches)) assert.equal(v, 0, `${k}: tokens differ from the all-hot run`);
});
