// The KV cache and scheduler flags (vLLM's names) of serve and generate: parsed, refused by name, bytes with units,
// and the boot line a run prints.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { KV_OPTIONS, kvBootLine, parseBytes, parseKvFlags } from './kv-flags.ts';

const flags = (argv: string[]) => parseKvFlags(parseArgs({ args: argv, options: KV_OPTIONS, strict: true }).values);

test('KV flags: block size, dtype, size, prefix caching, the batch; --max-running is --max-num-seqs', () => {
  assert.deepEqual(flags([]), { kvCache: {}, scheduler: {} });
  assert.deepEqual(
    flags(['--block-size', '32', '--kv-cache-dtype', 'fp8_e4m3', '--kv-cache-memory', '2GiB', '--no-enable-prefix-caching', '--max-num-seqs', '64', '--max-num-batched-tokens', '4096']),
    { kvCache: { blockSize: 32, dtype: 'fp8', bytes: 2 * 2 ** 30 }, prefixCaching: false, scheduler: { maxRunning: 64, maxStepTokens: 4096 } },
  );
  assert.deepEqual(flags(['--max-running', '5', '--kv-cache-dtype', 'auto', '--enable-prefix-caching']).scheduler, { maxRunning: 5 });
  assert.equal(flags(['--kv-cache-dtype', 'auto']).kvCache.dtype, 'auto');
  assert.equal(flags(['--kv-cache-tokens', '1000']).kvCache.tokens, 1000);
  assert.throws(() => flags(['--enable-prefix-caching', '--no-enable-prefix-caching']), /not both/);
  assert.throws(() => flags(['--kv-cache-memory', '1G', '--kv-cache-tokens', '8']), /--kv-cache-memory BYTES or --kv-cache-tokens N, not both/);
  assert.throws(() => flags(['--max-num-seqs', '4', '--max-running', '8']), /--max-running is its alias/);
  assert.throws(() => flags(['--block-size', '0']), /--block-size '0': expected an integer in 1\.\.1024/);
  assert.throws(() => flags(['--kv-cache-dtype', 'int8']), /--kv-cache-dtype 'int8'/);
  assert.throws(() => flags(['--max-num-batched-tokens', 'x']), /--max-num-batched-tokens 'x'/);
  assert.equal(parseBytes('kv-cache-memory', '1536'), 1536);
  assert.equal(parseBytes('kv-cache-memory', '1.5k'), 1500);
  assert.equal(parseBytes('kv-cache-memory', '3 MiB'), 3 * 2 ** 20);
  assert.throws(() => parseBytes('kv-cache-memory', '-1'), /--kv-cache-memory '-1': expected bytes/);
});

test('the boot line: blocks, positions, dtype, memory, prefix caching, the batch limits', () => {
  const kv = { numBlocks: 8192, blockSize: 16, dtype: 'bfloat16' as const, bytesPerBlock: 3 * 2 ** 20 / 8, freeBlocks: 8192, cachedFreeBlocks: 0, usage: 0, prefixCaching: true, prefixQueries: 0, prefixHits: 0, preemptions: 0 };
  assert.equal(kvBootLine(kv, { maxRunning: 256, maxStepTokens: 2048 }),
    'KV cache: 8,192 blocks of 16 positions = 131,072 positions, bfloat16, 3.00 GiB; prefix caching on; up to 256 sequences, 2048 tokens a step');
});

test('generate takes the flags and prints the pool it built', () => {
  const r = spawnSync(process.execPath, ['bin/residency.js', 'generate', '--prompt-ids', '1,2,3,4,5', '--max-tokens', '3', '--block-size', '8', '--kv-cache-tokens', '256',
    '--kv-cache-dtype', 'bfloat16', '--max-num-seqs', '4', '--max-num-batched-tokens', '64'], { encoding: 'utf8', env: { ...process.env, RESIDENCY_FROM_SOURCE: '1' } });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /KV cache: 32 blocks of 8 positions = 256 positions, bfloat16, [\d.]+ MiB; prefix caching on; up to 4 sequences, 64 tokens a step/);
});
