// A bounded load test on the real engine (tiny-moe, CPU): 48 concurrent streaming clients, all complete,
// none lost; latency percentiles are printed (not asserted: CI machines vary); heap after GC stays bounded
// across repeated rounds.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { formatReport, runLoad } from '../../bench/serve/loadgen.ts';
import { startServing, type Serving } from '../../src/server/boot.ts';

const CLIENTS = 48;
const TOKENS = 12;
const PROMPTS = ['The ls command', 'Die Datei wird', 'def parse(args):', 'const x = require(', 'La commande', 'ファイルを'];

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void; // a GC we can call without starting node with --expose-gc

let s: Serving;
before(async () => {
  s = await startServing({ modelDir: resolve(process.cwd(), 'models/tiny-moe'), backend: 'cpu', hot: 49, adapt: true, port: 0, host: '127.0.0.1', log: () => {}, config: { maxQueue: 64 } });
});
after(async () => { await s.close(); });

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

test(`${CLIENTS} concurrent streaming clients: all complete, no memory growth across rounds`, { timeout: 240_000 }, async () => {
  const heaps: number[] = [];
  for (let round = 0; round < 4; round++) {
    const { report, results } = await runLoad({ url: s.server.url, clients: CLIENTS, maxTokens: TOKENS, prompts: PROMPTS });
    console.log(`round ${round}: ${formatReport(report)}`);
    assert.equal(report.completed, CLIENTS, JSON.stringify(results.filter((r) => !r.ok).slice(0, 3)));
    for (const r of results) {
      assert.equal(r.tokens, TOKENS);
      assert.equal(r.finishReason, 'length');
      assert.ok(r.sawDone);
    }
    assert.equal(s.engine.running + s.engine.queueDepth, 0, 'nothing left in the engine');
    heaps.push(heapAfterGc());
  }
  const mb = heaps.map((h) => (h / 2 ** 20).toFixed(1));
  console.log(`heap after GC per round (MiB): ${mb.join(', ')}`);
  // Round 0 warms everything up (JIT, pools); later rounds must not keep growing.
  const growth = heaps[3]! - heaps[1]!;
  assert.ok(growth < 8 * 2 ** 20, `heap grew ${(growth / 2 ** 20).toFixed(1)} MiB from round 1 to round 3`);
  const metrics = await (await fetch(`${s.server.url}/metrics`)).text();
  assert.match(metrics, new RegExp(`residency_completion_tokens_total\\{model_name="tiny-moe"\\} ${4 * CLIENTS * TOKENS}\\b`));
  assert.match(metrics, /residency_time_to_first_token_seconds_count\{model_name="tiny-moe"\} 192\b/);
  assert.match(metrics, /residency_cold_share\{scope="window",model_name="tiny-moe"\} [0-9.e-]+/);
  assert.match(metrics, /residency_cold_share_layer\{layer="5",model_name="tiny-moe"\} [0-9.e-]+/);
  assert.match(metrics, /residency_swaps_applied_total\{model_name="tiny-moe"\} \d+/);
});
