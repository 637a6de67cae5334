// Builds small random qwen3_moe checkpoints on disk (config, byte-level tokenizer, safetensors shards),
// for tests that need a loadable model without the shipped one.

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expectedTensors } from './architecture.ts';
import { parseConfig } from './config.ts';
import { encodeSafetensors, float32Bytes, float32ToBF16Bytes } from './safetensors-writer.ts';
import type { TensorToWrite } from './safetensors-writer.ts';
import type { DType } from './weights.ts';
import { vocabPadding } from './tokenizer.ts';
import { mulberry32 } from '../util/rng.ts';
import { isInt4 } from './quant-config.ts';
import { int4Group } from './int4-config.ts';
import { isInt4Weight } from './int4-tensors.ts';
import { packAwq, packCompressedTensors, packGptq, quantizeInt4 } from './int4-pack.ts';

/** A config.json for a tiny model: 2 layers, 4 experts of width 6, hidden 8, vocab 260 (256 bytes + 4). */
export function syntheticConfig(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['Qwen3MoeForCausalLM'],
    model_type: 'qwen3_moe',
    vocab_size: 260,
    hidden_size: 8,
    num_hidden_layers: 2,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    head_dim: 4,
    moe_intermediate_size: 6,
    num_experts: 4,
    num_experts_per_tok: 2,
    norm_topk_prob: true,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    max_position_embeddings: 64,
    bos_token_id: 256,
    eos_token_id: 256,
    hidden_act: 'silu',
    attention_bias: false,
    use_sliding_window: false,
    sliding_window: null,
    mlp_only_layers: [],
    decoder_sparse_step: 1,
    rope_scaling: null,
    ...overrides,
  };
}

/**
 * A byte-level BPE tokenizer with the 256 byte tokens, no merges, and <|endoftext|> = 256; with `vocabSize`,
 * vocabulary entries no text encodes to (<|pad_N|>) fill ids 257 up to it.
 */
export function syntheticTokenizerJson(vocabSize?: number): Record<string, unknown> {
  // GPT-2's byte -> printable-char table, which the ByteLevel pre-tokenizer/decoder use.
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const vocab: Record<string, number> = {};
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const ch = printable.includes(b) ? b : 256 + extra++;
    vocab[String.fromCodePoint(ch)] = b;
  }
  for (let id = 257; id < (vocabSize ?? 0); id++) vocab[`<|pad_${id}|>`] = id;
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: [] },
  };
}

/** Deterministic uniform values in [-0.5, 0.5) (mulberry32), so fixtures are reproducible. */
export function seededRandom(seed: number): () => number {
  const u = mulberry32(seed);
  return () => u() - 0.5;
}

export interface SyntheticOptions {
  config?: Record<string, unknown>;
  dtype?: DType;
  seed?: number;
  /** 1 writes model.safetensors; more writes model-0000i-of-0000n.safetensors + index.json. */
  shards?: number;
  /** Changes the tensors before they are written (tests of corrupt checkpoints). */
  edit?: (tensors: TensorToWrite[]) => TensorToWrite[];
}

/**
 * The tensors a synthetic config needs, in expectedTensors order, with seeded random values. With an fp8
 * quantization_config, every linear projection is stored as random float8_e4m3fn bytes (no NaN) followed by
 * its `weight_scale_inv` (F32, one random scale in [2^-8, 2^-6) per weight_block_size block). With a 4-bit one (gptq,
 * awq, compressed-tensors), every linear it quantizes is random values quantized in TS and packed in that format's hub
 * layout (int4-pack.ts: fp16 scales for GPTQ and AWQ, bf16 for compressed-tensors; GPTQ v1 zero points from 1).
 */
export function syntheticTensors(config: Record<string, unknown>, dtype: DType = 'BF16', seed = 1): TensorToWrite[] {
  const spec = parseConfig(config, 'synthetic');
  const rand = seededRandom(seed);
  const out: TensorToWrite[] = [];
  const q = spec.quantization;
  for (const [name, shape] of expectedTensors(spec)) {
    const n = shape.reduce((a, b) => a * b, 1);
    if (q?.method === 'fp8' && /_proj\.weight$/.test(name)) {
      // Random bytes whose low seven bits are not all set (0x7F / 0xFF are NaN).
      const bytes = Uint8Array.from({ length: n }, () => {
        const b = Math.floor((rand() + 0.5) * 256) & 0xff;
        return (b & 0x7f) === 0x7f ? b ^ 1 : b;
      });
      out.push({ name, dtype: 'F8_E4M3', shape, bytes });
      const sShape = [Math.ceil(shape[0]! / q.blockSize[0]), Math.ceil(shape[1]! / q.blockSize[1])];
      const scales = Array.from({ length: sShape[0]! * sShape[1]! }, () => 2 ** -8 * (1.5 + rand() * 2));
      out.push({ name: `${name}_scale_inv`, dtype: 'F32', shape: sShape, bytes: float32Bytes(scales) });
      continue;
    }
    if (isInt4(q) && isInt4Weight(q, name, shape)) {
      const [N, K] = shape as [number, number];
      const w = Array.from({ length: n }, () => rand());
      const module = name.slice(0, -'.weight'.length);
      const x = quantizeInt4(w, N, K, int4Group(q, K), { symmetric: !q.zeroPoints, scaleType: q.method === 'compressed-tensors' ? 'bf16' : 'f16', minZero: q.zeroOffset });
      out.push(...(q.method === 'gptq' ? packGptq(x, module, q.zeroOffset === 1) : q.method === 'awq' ? packAwq(x, module) : packCompressedTensors(x, module)));
      continue;
    }
    const isNorm = name.endsWith('norm.weight') || name.endsWith('layernorm.weight');
    const values = Array.from({ length: n }, () => (isNorm ? 1 + rand() * 0.1 : rand()));
    const bytes = dtype === 'F32' ? float32Bytes(values) : dtype === 'BF16' ? float32ToBF16Bytes(values) : f16Bytes(values);
    out.push({ name, dtype, shape, bytes });
  }
  return out;
}

function f16Bytes(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(values.length * 2);
  const view = new DataView(out.buffer);
  // Values are in [-0.5, 1.05]: quantize through a scaled integer so every value is exactly an f16.
  values.forEach((v, i) => view.setUint16(i * 2, f32ToF16Bits(Math.round(v * 1024) / 1024), true));
  return out;
}

/** f32 -> f16 bits for normal-range values that f16 represents exactly (test data only). */
function f32ToF16Bits(v: number): number {
  if (v === 0) return Object.is(v, -0) ? 0x8000 : 0;
  const sign = v < 0 ? 0x8000 : 0;
  const a = Math.abs(v);
  const e = Math.floor(Math.log2(a));
  const mant = Math.round((a / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | mant;
}

/** Writes a loadable checkpoint folder to `dir`; returns the tensors written. */
export async function writeSyntheticCheckpoint(dir: string, opts: SyntheticOptions = {}): Promise<TensorToWrite[]> {
  const config = opts.config ?? syntheticConfig();
  const made = syntheticTensors(config, opts.dtype ?? 'BF16', opts.seed ?? 1);
  const tensors = opts.edit ? opts.edit(made) : made;
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  // A vocabulary far past the tokenizer's 257 tokens (real shapes) is filled, as the loader checks it against config.json.
  const vocab = Number(config['vocab_size']);
  await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(syntheticTokenizerJson(vocab - 257 > vocabPadding(vocab) ? vocab : undefined)));
  await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|endoftext|>', bos_token: '<|endoftext|>' }));
  const shards = opts.shards ?? 1;
  if (shards <= 1) {
    await writeFile(join(dir, 'model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
    return tensors;
  }
  const per = Math.ceil(tensors.length / shards);
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const part = tensors.slice(s * per, (s + 1) * per);
    for (const t of part) weightMap[t.name] = file;
    await writeFile(join(dir, file), encodeSafetensors(part, { format: 'pt' }));
  }
  const totalSize = tensors.reduce((a, t) => a + t.bytes.length, 0);
  await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2));
  return tensors;
}
