// Corrupt weight values are refused at load: a NaN or infinity in any tensor is BAD_CHECKPOINT naming it,
// found as the tensor is converted (served, 0xFF bytes in model.norm.weight gave 0 tokens, "finished: stop").
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { tensorToFloat32 } from './convert.ts';
import { loadModel } from './load.ts';

const MODEL_DIR = resolve(process.cwd(), 'models/tiny-moe');

/** A copy of the tiny model with `count` bytes of `tensor` (from its start + `at`) overwritten by `byte`. */
function corruptCopy(tensor: string, at: number, count: number, byte: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'nonfinite-'));
  for (const f of readdirSync(MODEL_DIR)) copyFileSync(join(MODEL_DIR, f), join(dir, f));
  const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
  const shard = index.weight_map[tensor]!;
  const bytes = readFileSync(join(dir, shard));
  const headerLen = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
  const start = 8 + headerLen + header[tensor]!.data_offsets[0] + at;
  const fd = openSync(join(dir, shard), 'r+');
  writeSync(fd, Buffer.alloc(count, byte), 0, count, start);
  closeSync(fd);
  return dir;
}

describe('non-finite weights', () => {
  it('the repro: 0xFF bytes (NaN) in model.norm.weight are refused at load, naming the tensor', async () => {
    const dir = corruptCopy('model.norm.weight', 6, 2, 0xff);
    try {
      await assert.rejects(loadModel(dir), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_CHECKPOINT'
        && /tensor "model\.norm\.weight": element 3 of \d+ is NaN/.test(e.message));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a NaN in a bf16 projection kept as stored from its own read (raw:false) is refused, naming the tensor', async () => {
    const dir = corruptCopy('model.layers.1.self_attn.q_proj.weight', 6, 2, 0xff);
    try {
      await assert.rejects(loadModel(dir, { raw: false, bf16: 'stored' }), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_CHECKPOINT'
        && /tensor "model\.layers\.1\.self_attn\.q_proj\.weight": element 3 of \d+x\d+ is NaN/.test(e.message));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an infinity inside an expert is refused too, and every dtype is checked in its conversion loop', () => {
    const t = (dtype: 'BF16' | 'F16' | 'F32', bytes: number[]) => ({ name: 'w', dtype, shape: [bytes.length / (dtype === 'F32' ? 4 : 2)], bytes: Uint8Array.from(bytes) });
    const cases = [
      t('BF16', [0x80, 0x3f, 0x80, 0x7f]), // 1.0, +Inf
      t('BF16', [0x80, 0x3f, 0x80, 0x7f].slice(0)), // same, the aligned path (a fresh array)
      t('F16', [0x00, 0x3c, 0x00, 0xfc]), // 1.0, -Inf
      t('F32', [0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f]), // 1.0, NaN
    ];
    const unaligned = new Uint8Array(5).subarray(1);
    unaligned.set([0x80, 0x3f, 0xc0, 0x7f]);
    cases.push({ name: 'w', dtype: 'BF16', shape: [2], bytes: unaligned });
    for (const c of cases) {
      assert.throws(() => tensorToFloat32(c, { finite: true }), (e: unknown) => e instanceof ResidencyError && /tensor "w": element 1 of 2 is (NaN|-?Infinity)/.test(e.message), c.dtype);
      assert.equal(tensorToFloat32(c).length, 2, 'without the option it converts as before');
    }
  });
});
