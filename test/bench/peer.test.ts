// The llama.cpp runner of bench:cpu's side-by-side mode against stand-in executables that print what
// llama-bench (-o json) and llama-batched-bench (--output-format jsonl) print: arguments passed, figures read.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseBatchedBench, parseLlamaBench, runPeer } from '../../bench/cpu/peer.ts';

const BENCH_JSON = JSON.stringify([
  { model_type: 'qwen3moe ?B BF16', n_threads: 2, n_prompt: 128, n_gen: 0, avg_ns: 1, avg_ts: 7985.5 },
  { model_type: 'qwen3moe ?B BF16', n_threads: 2, n_prompt: 0, n_gen: 256, avg_ns: 1, avg_ts: 2667.25 },
]);
const BATCHED_JSONL = [
  'main: n_kv_max = 1600, n_batch = 2048',
  '{"n_kv_max": 1600, "pp": 128, "tg": 256, "pl": 4, "n_kv": 1536, "t_pp": 0.1, "speed_pp": 5120.0, "t_tg": 0.2, "speed_tg": 5123.5, "t": 0.3, "speed": 5100.0}',
].join('\n');

test('parsers read llama-bench\'s pp and tg tests and llama-batched-bench\'s decode speed', () => {
  assert.deepEqual(parseLlamaBench(BENCH_JSON), { pp: 7985.5, tg: 2667.25 });
  assert.equal(parseBatchedBench(BATCHED_JSONL, 4), 5123.5);
  assert.throws(() => parseBatchedBench(BATCHED_JSONL, 8), /no line for 8 sequences/);
  assert.throws(() => parseLlamaBench('[]'), /no pp or no tg test/);
});

test('runPeer passes the thread count and lengths and reads both tools', () => {
  const dir = mkdtempSync(join(tmpdir(), 'peer-'));
  try {
    for (const [name, out] of [['llama-bench', BENCH_JSON], ['llama-batched-bench', BATCHED_JSONL]] as const) {
      const path = join(dir, name);
      writeFileSync(path, `#!/bin/sh\necho "$@" >> ${join(dir, 'args')}\ncat <<'EOF'\n${out}\nEOF\n`);
      chmodSync(path, 0o755);
    }
    writeFileSync(join(dir, 'm.gguf'), '');
    const r = runPeer(join(dir, 'llama-bench'), join(dir, 'm.gguf'), { threads: 2, prompt: 128, gen: 256 }, 4);
    assert.deepEqual(r, { pp: 7985.5, tg: 2667.25, tgBatch: { batch: 4, tokS: 5123.5 } });
    const args = readFileSync(join(dir, 'args'), 'utf8').trim().split('\n');
    assert.match(args[0]!, /-p 128 -n 256 -t 2 -r 1 -o json/);
    assert.match(args[1]!, /-npp 128 -ntg 256 -npl 4 -t 2 -tb 2 --output-format jsonl/);
    assert.throws(() => runPeer(join(dir, 'nope'), join(dir, 'm.gguf'), { threads: 1, prompt: 8, gen: 8 }), /no such file/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
