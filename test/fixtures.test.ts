// The fixtures the tests read come from the repository: the random-weight family checkpoints are generated
// byte for byte as pinned (their checked-in transformers references were made from those bytes), in the
// layout each config describes, and the CPU backend runs every one with routing spread over the experts; a
// missing fixture is an error naming it and how it is made.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../src/model/load.ts';
import { moeLayerCount } from '../src/model/spec.ts';
import { readHeader } from '../src/model/safetensors.ts';
import { createCpuBackend } from '../src/backend/cpu/cpu-backend.ts';
import { argmax } from '../src/backend/argmax.ts';
import { FAMILIES, FIXTURES_DIR, REPO_ROOT, TINY_MOE_MODEL, familyCheckpoint, familyConfig, requireFixture } from '../fixtures/fixture-paths.ts';
import { bySequence } from '../src/backend/sequences.ts';
import { FIXTURE_SEED, GENERATOR_VERSION, cachedCheckpoint, checkpointDigest } from '../fixtures/make/generate.ts';

const pinned = JSON.parse(readFileSync(join(FIXTURES_DIR, 'make', 'digests.json'), 'utf8')) as { generator_version: number; seed: number; families: Record<string, string> };
const prompts = (JSON.parse(readFileSync(join(FIXTURES_DIR, 'make', 'parity-prompts.json'), 'utf8')) as { cases: { prompt_ids: number[] }[] }).cases.map((c) => c.prompt_ids);

describe('generated family checkpoints', () => {
  it('are the pinned bytes (digests.json, for this generator version and seed)', () => {
    assert.deepEqual([pinned.generator_version, pinned.seed], [GENERATOR_VERSION, FIXTURE_SEED], 'digests.json pins another version or seed: regenerate the references');
    for (const family of FAMILIES) {
      assert.equal(checkpointDigest(familyCheckpoint(family)), pinned.families[family],
        `${family}: the generator's bytes changed; bump GENERATOR_VERSION, pin the new digests and remake its parity.json (fixtures/make/device-refs.sh)`);
    }
  });

  it('hold the stored formats their configs name, sharded with an index, the tokenizer beside them', async () => {
    const dtypes = async (family: (typeof FAMILIES)[number]): Promise<Set<string>> => {
      const dir = familyCheckpoint(family);
      const shards = readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
      assert.ok(shards.length >= 2, `${family}: ${shards.length} shard(s)`);
      assert.ok(readdirSync(dir).includes('model.safetensors.index.json'));
      assert.deepEqual(readFileSync(join(dir, 'tokenizer.json')), readFileSync(join(TINY_MOE_MODEL, 'tokenizer.json')));
      assert.deepEqual(readFileSync(join(dir, 'config.json')), readFileSync(familyConfig(family)));
      const seen = new Set<string>();
      for (const s of shards) for (const t of (await readHeader(join(dir, s))).tensors.values()) seen.add(t.dtype);
      return seen;
    };
    assert.deepEqual([...await dtypes('mixtral-tiny')], ['BF16']);
    assert.deepEqual([...await dtypes('qwen3-moe-fp8-tiny')].sort(), ['BF16', 'F32', 'F8_E4M3']);
    assert.deepEqual([...await dtypes('gpt-oss-tiny-mxfp4')].sort(), ['BF16', 'U8']);
    assert.deepEqual([...await dtypes('qwen3-moe-gptq-tiny')].sort(), ['BF16', 'F16', 'I32']);
    assert.deepEqual([...await dtypes('qwen3-moe-awq-tiny')].sort(), ['BF16', 'F16', 'I32']);
    assert.deepEqual([...await dtypes('qwen3-moe-ct-int4-tiny')].sort(), ['BF16', 'I32', 'I64']);
  });

  for (const family of FAMILIES) {
    it(`${family}: the CPU backend runs it, logits finite and not flat, routing spread over the experts`, async () => {
      const { spec, weights } = await loadModel(familyCheckpoint(family));
      const b = bySequence(createCpuBackend(spec, weights, {}));
      try {
        const Lm = moeLayerCount(spec);
        const [K, E, V] = [spec.topK, spec.numExperts, spec.vocabSize];
        const picks = Array.from({ length: Lm }, () => new Float64Array(E));
        prompts.forEach((p, i) => b.openSequence(i, p.length + 8));
        let out = b.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 })), count: false, recordRouting: true });
        const firstTokens: number[] = [];
        for (let s = 0; s < 4; s++) {
          out.routing!.forEach((e, i) => { picks[Math.floor(i / K) % Lm]![e]! += 1; });
          assert.ok(out.logits.every(Number.isFinite), `step ${s}: a logit is not finite`);
          const next = prompts.map((_, i) => argmax(out.logits, i * V, V));
          if (s === 0) firstTokens.push(...next);
          const row = out.logits.subarray(0, V);
          assert.ok(Math.max(...row) - Math.min(...row) > 1, `step ${s}: logits within 1 of each other`);
          out = b.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: [next[i]!], startPos: p.length + s })), count: false, recordRouting: true });
        }
        assert.ok(new Set(firstTokens).size >= 4, `8 prompts gave only ${new Set(firstTokens).size} distinct next tokens`);
        picks.forEach((layer, m) => {
          const total = layer.reduce((a, x) => a + x, 0);
          const used = layer.filter((x) => x > 0).length;
          assert.ok(used >= E * 0.75, `moe layer ${m}: ${used} of ${E} experts picked`);
          assert.ok(Math.max(...layer) / total < 3 / E + 0.1, `moe layer ${m}: one expert takes ${(Math.max(...layer) / total).toFixed(2)} of the picks`);
        });
      } finally {
        b.dispose();
      }
    });
  }

  it('test files asking at once get one complete folder (each writes its own, the first rename wins)', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'fixture-cache-'));
    try {
      const script = `import { cachedCheckpoint } from './fixtures/make/generate.ts';
        console.log(cachedCheckpoint('mixtral-tiny', { config: 'fixtures/mixtral-tiny/config.json', tokenizer: 'models/tiny-moe' }, ${JSON.stringify(cache)}));`;
      const run = (): Promise<string> => new Promise((res, rej) => {
        const p = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
        let text = '';
        p.stdout.on('data', (d: Buffer) => (text += d.toString()));
        p.on('close', (code) => (code === 0 ? res(text.trim()) : rej(new Error(`generator child exited ${code}`))));
      });
      const dirs = await Promise.all([run(), run(), run()]);
      assert.equal(new Set(dirs).size, 1);
      assert.deepEqual(readdirSync(cache), [dirs[0]!.split('/').at(-1)], 'no temporary folder left behind');
      assert.equal(checkpointDigest(dirs[0]!), pinned.families['mixtral-tiny']);
      assert.equal(cachedCheckpoint('mixtral-tiny', { config: familyConfig('mixtral-tiny'), tokenizer: TINY_MOE_MODEL }, cache), dirs[0]);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

it('a missing fixture is an error that names it and says how it is made', () => {
  assert.throws(() => requireFixture(join(FIXTURES_DIR, 'no-such-family', 'parity.json'), 'made by fixtures/make/device-refs.sh'),
    /^Error: fixture fixtures\/no-such-family\/parity\.json is missing: made by fixtures\/make\/device-refs\.sh \(see fixtures\/README\.md\)$/);
});
