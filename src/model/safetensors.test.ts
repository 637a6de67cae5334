// Corrupt and truncated files are refused with BAD_CHECKPOINT naming the file, the tensor and the rule.

import assert from 'node:assert/strict';
import { copyFile, readFile, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { openCheckpoint } from './checkpoint.ts';
import { loadModel } from './load.ts';
import { readHeader, readTensors } from './safetensors.ts';
import { encodeRaw, encodeSafetensors, float32ToBF16Bytes } from './safetensors-writer.ts';
import { syntheticConfig, syntheticTensors, writeSyntheticCheckpoint } from './synthetic.ts';
import { SHIPPED_MODEL, rejectsWith, withTempDir } from './test-helpers.ts';

const a = { name: 'a', dtype: 'BF16' as const, shape: [2, 3], bytes: float32ToBF16Bytes([1, 2, 3, 4, 5, 6]) };
const b = { name: 'b', dtype: 'F32' as const, shape: [2], bytes: new Uint8Array(new Float32Array([7, 8]).buffer) };

/** Writes `bytes` as x.safetensors in a temp dir and reads its header (and tensors, if it validates). */
async function load(bytes: Uint8Array): Promise<unknown> {
  return withTempDir(async (dir) => {
    const file = join(dir, 'x.safetensors');
    await writeFile(file, bytes);
    return readTensors(await readHeader(file));
  });
}

/** A file whose header is `header` (any JSON) followed by `dataLen` zero bytes. */
function withHeader(header: unknown, dataLen: number): Uint8Array {
  return encodeRaw(JSON.stringify(header), [new Uint8Array(dataLen)]);
}

describe('safetensors: valid files', () => {
  it('round-trips the writer, with __metadata__', async () => {
    const tensors = (await load(encodeSafetensors([a, b], { format: 'pt' }))) as Map<string, { bytes: Uint8Array; shape: number[] }>;
    assert.deepEqual([...tensors.keys()], ['a', 'b']);
    assert.deepEqual(tensors.get('a')!.bytes, a.bytes);
    assert.deepEqual(tensors.get('b')!.shape, [2]);
  });
  it('reads in bounded groups with the same bytes, and progress sums to the data section', () => withTempDir(async (dir) => {
    const file = join(dir, 'g.safetensors');
    const tensors = syntheticTensors(syntheticConfig());
    await writeFile(file, encodeSafetensors(tensors));
    const header = await readHeader(file);
    for (const groupBytes of [1, 100, 1e9]) {
      let bytes = 0;
      const read = await readTensors(header, (n) => { bytes += n; }, groupBytes);
      assert.equal(bytes, header.fileSize - header.dataStart);
      for (const t of tensors) assert.deepEqual(read.get(t.name)!.bytes, t.bytes, `${t.name} groupBytes=${groupBytes}`);
    }
  }));
  it('accepts empty tensors and scalar shapes', async () => {
    const header = { e: { dtype: 'F32', shape: [0, 4], data_offsets: [0, 0] }, s: { dtype: 'F32', shape: [], data_offsets: [0, 4] } };
    const tensors = (await load(withHeader(header, 4))) as Map<string, unknown>;
    assert.equal(tensors.size, 2);
  });
});

describe('safetensors: corrupt files are refused', () => {
  const cases: [string, () => Uint8Array, RegExp[]][] = [
    ['file shorter than 8 bytes', () => new Uint8Array(5), [/x\.safetensors/, /too short/]],
    ['header length past the file', () => {
      const f = encodeSafetensors([a]);
      new DataView(f.buffer).setBigUint64(0, BigInt(f.length), true);
      return f;
    }, [/x\.safetensors/, /header length \d+ exceeds the file size/]],
    ['header length over the 100 MB bound', () => {
      const f = encodeSafetensors([a]);
      new DataView(f.buffer).setBigUint64(0, 1n << 40n, true);
      return f;
    }, [/exceeds the 104857600-byte limit/]],
    ['header length too small', () => {
      const f = encodeSafetensors([a]);
      new DataView(f.buffer).setBigUint64(0, 0n, true);
      return f;
    }, [/too small/]],
    ['malformed JSON', () => encodeRaw('{"a": {"dtype": "BF16", "shape": [2', [new Uint8Array(12)]), [/x\.safetensors/, /not valid JSON/]],
    ['header not UTF-8', () => {
      const f = encodeRaw('{"a":1}', []);
      f[9] = 0xff;
      return f;
    }, [/not valid UTF-8/]],
    ['header a JSON array', () => withHeader([1, 2], 0), [/must be a JSON object/]],
    ['entry not an object', () => withHeader({ a: 5 }, 0), [/tensor "a"/, /entry must be an object/]],
    ['unknown dtype', () => withHeader({ a: { dtype: 'F64', shape: [1], data_offsets: [0, 8] } }, 8), [/tensor "a"/, /dtype F64 is not supported/]],
    ['lower-case dtype', () => withHeader({ a: { dtype: 'bf16', shape: [1], data_offsets: [0, 2] } }, 2), [/dtype bf16 is not supported/]],
    ['dtype not a string', () => withHeader({ a: { dtype: 2, shape: [1], data_offsets: [0, 2] } }, 2), [/dtype must be a string/]],
    ['negative shape', () => withHeader({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), [/tensor "a"/, /non-negative integers/]],
    ['fractional shape', () => withHeader({ a: { dtype: 'F32', shape: [1.5], data_offsets: [0, 6] } }, 6), [/non-negative integers/]],
    ['shape not an array', () => withHeader({ a: { dtype: 'F32', shape: '2', data_offsets: [0, 8] } }, 8), [/shape must be an array/]],
    ['data_offsets of wrong length', () => withHeader({ a: { dtype: 'F32', shape: [1], data_offsets: [0] } }, 4), [/data_offsets must be \[start, end\]/]],
    ['data_offsets end before start', () => withHeader({ a: { dtype: 'F32', shape: [0], data_offsets: [4, 0] } }, 4), [/end before start/]],
    ['size mismatch', () => withHeader({ a: { dtype: 'BF16', shape: [2, 3], data_offsets: [0, 10] } }, 12), [/tensor "a"/, /size mismatch: shape \[2,3\] x BF16 is 12 bytes but data_offsets \[0, 10\] span 10/]],
    ['overlapping ranges', () => withHeader({
      a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
      b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
    }, 12), [/"a" \[0, 8\] and "b" \[4, 12\] overlap/]],
    ['range past EOF', () => withHeader({ a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, 12), [/tensor "a"/, /run past the end of the data section \(12 bytes\)/]],
    ['__metadata__ not an object', () => withHeader({ __metadata__: 'pt' }, 0), [/__metadata__ must be an object/]],
  ];
  for (const [what, make, patterns] of cases) {
    it(what, async () => {
      await rejectsWith(load(make()), 'BAD_CHECKPOINT', ...patterns);
    });
  }
});

describe('safetensors: a real shard, truncated or with its header edited', () => {
  const shard = join(SHIPPED_MODEL, 'model-00002-of-00002.safetensors');

  it('a truncated shard is refused (range past EOF) before any data is read', () => withTempDir(async (dir) => {
    const copy = join(dir, 'model-00002-of-00002.safetensors');
    await copyFile(shard, copy);
    await truncate(copy, 1_000_000);
    await rejectsWith(readHeader(copy), 'BAD_CHECKPOINT', /model-00002-of-00002\.safetensors/, /tensor "model\.layers\.\d+\./, /run past the end of the data section/);
  }));

  it('a shard truncated inside its header is refused', () => withTempDir(async (dir) => {
    const copy = join(dir, 'y.safetensors');
    await copyFile(shard, copy);
    await truncate(copy, 100);
    await rejectsWith(readHeader(copy), 'BAD_CHECKPOINT', /header length \d+ exceeds the file size 100/);
  }));

  /** Copies the shard with `edit` applied to its header text (same length, so offsets stay valid). */
  async function editedHeader(dir: string, edit: (header: string) => string): Promise<string> {
    const bytes = new Uint8Array(await readFile(shard));
    const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    const header = new TextDecoder().decode(bytes.subarray(8, 8 + n));
    const edited = new TextEncoder().encode(edit(header));
    assert.equal(edited.length, n, 'edit must keep the header length');
    bytes.set(edited, 8);
    const copy = join(dir, 'z.safetensors');
    await writeFile(copy, bytes);
    return copy;
  }

  it('an unknown dtype in a real header', () => withTempDir(async (dir) => {
    const copy = await editedHeader(dir, (h) => h.replace('"BF16"', '"BF17"'));
    await rejectsWith(readHeader(copy), 'BAD_CHECKPOINT', /z\.safetensors/, /dtype BF17 is not supported/);
  }));

  it('a shape edited in a real header (size mismatch)', () => withTempDir(async (dir) => {
    const copy = await editedHeader(dir, (h) => h.replace('"shape":[128,48]', '"shape":[128,47]'));
    await rejectsWith(readHeader(copy), 'BAD_CHECKPOINT', /size mismatch: shape \[128,47\]/);
  }));
});

describe('checkpoint folders: index, shards and architecture', () => {
  it('a folder with no checkpoint', () => withTempDir(async (dir) => {
    await rejectsWith(openCheckpoint(dir), 'BAD_CHECKPOINT', /no model\.safetensors or model\.safetensors\.index\.json/);
  }));

  it('index.json pointing at a missing shard', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    await unlink(join(dir, 'model-00002-of-00002.safetensors'));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /shard model-00002-of-00002\.safetensors \(named for tensor "model\.[^"]+"\) does not exist/);
  }));

  it('index.json naming the wrong shard for a tensor', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    const indexPath = join(dir, 'model.safetensors.index.json');
    const index = JSON.parse(await readFile(indexPath, 'utf8'));
    index.weight_map['model.embed_tokens.weight'] = 'model-00002-of-00002.safetensors';
    await writeFile(indexPath, JSON.stringify(index));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /tensor "model\.embed_tokens\.weight" is mapped to model-00002-of-00002\.safetensors but model-00002-of-00002\.safetensors does not contain it/);
  }));

  it('index.json naming a path outside the folder', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { x: '../model.safetensors' } }));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /must be a plain file name/);
  }));

  it('index.json malformed', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    await writeFile(join(dir, 'model.safetensors.index.json'), '{"weight_map": ');
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /model\.safetensors\.index\.json: not valid JSON/);
  }));

  it('a tensor stored in two shards', () => withTempDir(async (dir) => {
    const tensors = syntheticTensors(syntheticConfig());
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    await writeFile(join(dir, 'model-00002-of-00002.safetensors'), encodeSafetensors([...tensors.slice(22), tensors[0]!]));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /tensor "model\.embed_tokens\.weight" appears in both/);
  }));

  it('a truncated shard of a sharded checkpoint', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { shards: 2 });
    const shard = join(dir, 'model-00001-of-00002.safetensors');
    await truncate(shard, (await readFile(shard)).length - 10);
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /model-00001-of-00002\.safetensors/, /run past the end/);
  }));

  it('a tensor with the wrong shape for config.json', () => withTempDir(async (dir) => {
    const tensors = syntheticTensors(syntheticConfig());
    const i = tensors.findIndex((t) => t.name === 'model.layers.1.mlp.experts.2.up_proj.weight');
    tensors[i] = { ...tensors[i]!, shape: [8, 6] }; // transposed: [I,H] expected
    await writeSyntheticCheckpoint(dir);
    await writeFile(join(dir, 'model.safetensors'), encodeSafetensors(tensors));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /model\.safetensors: tensor "model\.layers\.1\.mlp\.experts\.2\.up_proj\.weight" has shape \[8, 6\] but config\.json implies \[6, 8\]/);
  }));

  it('a missing tensor', () => withTempDir(async (dir) => {
    const tensors = syntheticTensors(syntheticConfig()).filter((t) => t.name !== 'model.layers.0.self_attn.k_norm.weight');
    await writeSyntheticCheckpoint(dir);
    await writeFile(join(dir, 'model.safetensors'), encodeSafetensors(tensors));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /missing 1 tensor\(s\).*"model\.layers\.0\.self_attn\.k_norm\.weight"/);
  }));

  it('an untied config without lm_head', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir);
    const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
    await writeFile(join(dir, 'config.json'), JSON.stringify({ ...config, tie_word_embeddings: false }));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /"lm_head\.weight".*tie_word_embeddings is false/);
  }));

  it('a missing or malformed config.json', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir);
    await unlink(join(dir, 'config.json'));
    await rejectsWith(loadModel(dir), 'BAD_CONFIG', /cannot read .*config\.json/);
    await writeFile(join(dir, 'config.json'), '{"model_type": "qwen3_moe",');
    await rejectsWith(loadModel(dir), 'BAD_CONFIG', /config\.json: not valid JSON/);
  }));

  it('a missing tokenizer.json, or one larger than the model vocabulary', () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir);
    await copyFile(join(SHIPPED_MODEL, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /token ids up to 8191 but config\.json vocab_size is 260/);
    await unlink(join(dir, 'tokenizer.json'));
    await rejectsWith(loadModel(dir), 'BAD_CHECKPOINT', /cannot read tokenizer .*tokenizer\.json/);
  }));
});
