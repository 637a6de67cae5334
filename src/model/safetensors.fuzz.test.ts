// Seeded fuzz: mutated checkpoint files either load or are refused with BAD_CHECKPOINT; nothing else
// (no TypeError, RangeError, hang or out-of-memory allocation from a hostile header).

import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { it } from 'node:test';
import { ResidencyError } from '../errors.ts';
import { loadModel } from './load.ts';
import { DTYPE_SIZE } from './safetensors.ts';
import { encodeRaw, encodeSafetensors } from './safetensors-writer.ts';
import { seededRandom, syntheticConfig, syntheticTensors, writeSyntheticCheckpoint } from './synthetic.ts';
import { withTempDir } from './test-helpers.ts';

const ITERATIONS = 400;

type Mutation = (file: Uint8Array, rand: () => number) => Uint8Array;
const int = (rand: () => number, n: number): number => Math.floor((rand() + 0.5) * n);

function headerOf(file: Uint8Array): { n: number; json: Record<string, any>; data: Uint8Array } {
  const n = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  return { n, json: JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))), data: file.subarray(8 + n) };
}

const weirdValues = [-1, 0, 1, 2.5, 1e300, 2 ** 53, -0, null, 'x', [], {}, true, [1, 2, 3], 'BF16', 'F64'];

const mutations: Record<string, Mutation> = {
  flipBytes(file, rand) {
    const out = file.slice();
    const count = 1 + int(rand, 4);
    // Mostly inside the length prefix and header, where parsing happens; sometimes anywhere.
    const n = Math.min(out.length - 8, Number(new DataView(out.buffer).getBigUint64(0, true)));
    for (let i = 0; i < count; i++) out[int(rand, rand() < 0.8 ? 8 + n : out.length)] ^= 1 << int(rand, 8);
    return out;
  },
  lengthPrefix(file, rand) {
    const out = file.slice();
    const n = Number(new DataView(out.buffer).getBigUint64(0, true));
    const choices = [0n, 1n, BigInt(n - 1), BigInt(n + 1), BigInt(n + int(rand, 64)), BigInt(file.length), 2n ** 63n, 2n ** 64n - 1n];
    new DataView(out.buffer).setBigUint64(0, choices[int(rand, choices.length)]!, true);
    return out;
  },
  truncate(file, rand) {
    return file.slice(0, int(rand, file.length));
  },
  appendOrInsert(file, rand) {
    const at = int(rand, file.length);
    const extra = new Uint8Array(1 + int(rand, 16)).map(() => int(rand, 256));
    const out = new Uint8Array(file.length + extra.length);
    out.set(file.subarray(0, at));
    out.set(extra, at);
    out.set(file.subarray(at), at + extra.length);
    return out;
  },
  jsonEdit(file, rand) {
    const { json, data } = headerOf(file);
    const names = Object.keys(json).filter((k) => k !== '__metadata__');
    const name = names[int(rand, names.length)]!;
    const entry = json[name];
    const edit = int(rand, 8);
    const weird = weirdValues[int(rand, weirdValues.length)];
    if (edit === 0) entry.dtype = weird;
    else if (edit === 1) entry.shape[int(rand, Math.max(1, entry.shape.length))] = weird;
    else if (edit === 2) entry.data_offsets[int(rand, 2)] += int(rand, 9) - 4;
    else if (edit === 3) delete entry[['dtype', 'shape', 'data_offsets'][int(rand, 3)]!];
    else if (edit === 4) entry.data_offsets = json[names[int(rand, names.length)]!].data_offsets;
    else if (edit === 5) json[name] = weird;
    else if (edit === 6) entry.shape = [...entry.shape].reverse().concat(rand() < 0.5 ? [1] : []);
    else delete json[name];
    return encodeRaw(JSON.stringify(json), [data]);
  },
  jsonText(file, rand) {
    const { n, data } = headerOf(file);
    const text = new TextDecoder().decode(file.subarray(8, 8 + n));
    const at = int(rand, text.length);
    const junk = ['', '{', '}', '"', ',', ']', '[', '1', ':', '\\', '\u00ff', 'null'][int(rand, 12)]!;
    const edited = text.slice(0, at) + junk + text.slice(at + int(rand, 3));
    return encodeRaw(edited, [data], false);
  },
};

it(`fuzz: ${ITERATIONS} mutated checkpoints load or fail with BAD_CHECKPOINT`, { timeout: 60_000 }, async () => {
  const rand = seededRandom(20261130);
  const base = encodeSafetensors(syntheticTensors(syntheticConfig()), { format: 'pt' });
  const names = Object.keys(mutations);
  const byteLevel = ['flipBytes', 'lengthPrefix', 'truncate', 'appendOrInsert'];
  const outcomes: Record<string, { ok: number; refused: number }> = {};
  await withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir);
    for (let i = 0; i < ITERATIONS; i++) {
      const kind = names[i % names.length]!;
      let file = mutations[kind]!(base, rand);
      // Sometimes stack a byte-level mutation on top (JSON-level ones need a parseable header).
      if (rand() < 0.2 && file.length >= 16) file = mutations[byteLevel[int(rand, byteLevel.length)]!]!(file, rand);
      await writeFile(join(dir, 'model.safetensors'), file);
      const tally = (outcomes[kind] ??= { ok: 0, refused: 0 });
      try {
        const m = await loadModel(dir);
        // A file that loads must be self-consistent: every tensor's bytes match its shape and dtype.
        for (const t of m.raw.values()) assert.equal(t.bytes.length, t.shape.reduce((x, y) => x * y, 1) * DTYPE_SIZE[t.dtype]);
        tally.ok++;
      } catch (e) {
        if (!(e instanceof ResidencyError) || e.code !== 'BAD_CHECKPOINT') {
          assert.fail(`iteration ${i} (${kind}): expected a load or BAD_CHECKPOINT, got ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
        }
        tally.refused++;
      }
    }
  });
  // Most mutations must be refused, else the fuzzer is not reaching the validator.
  const refused = Object.values(outcomes).reduce((s, o) => s + o.refused, 0);
  assert.ok(refused > ITERATIONS / 2, JSON.stringify(outcomes));
});
