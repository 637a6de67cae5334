// The server on CUDA (boot.ts, --hot 49, adapting): greedy HTTP completions equal the CUDA greedy output
// and the parity reference, streamed too, with rows swapping underneath (serve-smoke.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModel } from '../../src/model/load.ts';
import { parityCases } from './churn.ts';
import { fixtureDir, modelDir } from './harness.ts';
import { report } from './model.gpu.ts';
import { runServeSmoke } from './serve-smoke.ts';

test('serve on CUDA (hot 49/64, adapting): /v1/completions greedy == CUDA greedy == parity tokens; stream; /v1/residency, /metrics', async () => {
  const m = await loadModel(modelDir());
  const r = await runServeSmoke('cuda', m, parityCases(fixtureDir()), { tokens: 40 });
  report['serve'] = r;
  console.log(`# serve smoke: ${JSON.stringify(r)}`);
  for (const p of r.prompts) {
    assert.ok(p.tokensEqualReference, `${p.domain}: CUDA greedy tokens differ from parity.json`);
    assert.ok(p.textEqual && p.textChars > 0, `${p.domain}: served text differs from the CUDA greedy text (or is empty)`);
    assert.equal(p.completionTokens, 40);
  }
  assert.ok(r.streamedEqual && r.streamedDone, 'streamed text');
  assert.ok(r.concurrentEqual, 'concurrent (batched) requests');
  assert.equal(r.residencyStatus, 200);
  assert.equal(r.metricsStatus, 200);
  assert.ok(r.metricsHasColdShare, '/metrics has residency_cold_share');
  assert.ok(r.residency.applied > 0, 'rows were swapped while serving');
});
