// A checkpoint's block-FP8 twin, as make-checkpoint.py --format fp8 writes it (the hub format: every 2-D linear
// weight F8_E4M3 with a float32 weight_scale_inv per block; norms, embed_tokens, lm_head and the router as they
// were), and its float32 twin of the dequantized values: the CPU tests compare the two bit for bit, the device
// tests CUDA against the CPU on the FP8 one.
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openCheckpoint, readCheckpoint } from '../src/model/checkpoint.ts';
import { encodeSafetensors, float32Bytes, type TensorToWrite } from '../src/model/safetensors-writer.ts';
import { tensorToFloat32 } from '../src/model/float-convert.ts';
import { fp8Block } from '../src/model/fp8-block.ts';

export const BLOCK: [number, number] = [128, 128];

/** DeepSeek-V3's hub quantization_config. */
export const HUB_FP8 = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: BLOCK };

/** The tensors make-checkpoint.py --format fp8 stores as block FP8: 2-D linear weights but norms, embeddings, lm_head and the router. */
export function quantizedName(name: string, shape: readonly number[]): boolean {
  return shape.length === 2 && name.endsWith('.weight') && !['norm', 'embed_tokens', 'lm_head', 'mlp.gate.weight'].some((k) => name.includes(k));
}

/**
 * Writes checkpoint SRC (sharded, with an index) twice: `fp8` with every quantized tensor as F8_E4M3 + weight_scale_inv (config.json with
 * the hub's quantization_config), `f32` with those tensors as float32 of their dequantized values; every other
 * tensor as stored, each in its shard of the fixture. `keep`: tensors left as stored in the fp8 copy too.
 */
export async function writeTwins(SRC: string, fp8: string, f32: string, quant: Record<string, unknown>, keep: (name: string) => boolean = () => false): Promise<void> {
  const raw = await readCheckpoint(await openCheckpoint(SRC));
  const index = JSON.parse(readFileSync(join(SRC, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
  const shards = new Map<string, { fp8: TensorToWrite[]; f32: TensorToWrite[] }>();
  const fp8Map: Record<string, string> = {};
  for (const [name, t] of raw) {
    const shard = index.weight_map[name]!;
    if (!shards.has(shard)) shards.set(shard, { fp8: [], f32: [] });
    const out = shards.get(shard)!;
    fp8Map[name] = shard;
    if (!quantizedName(name, t.shape) || keep(name)) {
      out.fp8.push(t);
      out.f32.push(t);
      continue;
    }
    const [rows, cols] = t.shape as [number, number];
    const q = fp8Block(tensorToFloat32(t, { finite: true }), rows, cols, BLOCK);
    const scaleName = `${name}_scale_inv`;
    out.fp8.push({ name, dtype: 'F8_E4M3', shape: t.shape, bytes: q.data });
    out.fp8.push({ name: scaleName, dtype: 'F32', shape: [Math.ceil(rows / BLOCK[0]), Math.ceil(cols / BLOCK[1])], bytes: float32Bytes(q.scales) });
    fp8Map[scaleName] = shard;
    out.f32.push({ name, dtype: 'F32', shape: t.shape, bytes: float32Bytes(q.dequantized) });
  }
  const config = JSON.parse(readFileSync(join(SRC, 'config.json'), 'utf8')) as Record<string, unknown>;
  for (const [dir, key, map] of [[fp8, 'fp8', fp8Map], [f32, 'f32', index.weight_map]] as const) {
    for (const [shard, ts] of shards) writeFileSync(join(dir, shard), encodeSafetensors(ts[key], { format: 'pt' }));
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: map }));
    writeFileSync(join(dir, 'config.json'), JSON.stringify(key === 'fp8' ? { ...config, quantization_config: quant } : config));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(SRC, f), join(dir, f));
  }
}

