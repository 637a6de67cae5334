// Loads a checkpoint folder: config -> spec, validated safetensors -> raw tensors -> float32 weights,
// and the tokenizer. The one entry point the engine, CLI and server use.

import { basename, resolve } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { checkArchitecture, expectedTensors } from './architecture.ts';
import { checkQuantTensors } from './quant-check.ts';
import { openCheckpoint, readCheckpoint } from './checkpoint.ts';
import { loadConfig } from './config.ts';
import { toFloat32Weights } from './convert.ts';
import { familyOf } from './families/index.ts';
import { loadTokenizer, vocabPadding } from './tokenizer.ts';
import type { Tokenizer } from './tokenizer.ts';
import type { ModelSpec } from './spec.ts';
import type { Bf16Memory, ModelWeights, RawTensor } from './weights.ts';
import type { Bf16Placer } from './families/common.ts';
import { fileTensorSource, mapTensorSource, readBf16Checked, readOnGet, type TensorSource } from './tensor-source.ts';
import { bf16Matrix } from './quant.ts';
import type { CheckpointLayout } from './checkpoint.ts';

export interface LoadedModel {
  spec: ModelSpec;
  /** Tensors exactly as stored (views into the shards' bytes); empty when loaded with `raw: false`. */
  raw: ReadonlyMap<string, RawTensor>;
  /** float32 weights; when loaded with `weights: false`, every array is empty (length 0). */
  weights: ModelWeights;
  /**
   * The stored tensors on demand: the shard files themselves when loaded with `stream: true` (nothing read
   * yet: a backend streams them), else the raw tensors above.
   */
  tensors: TensorSource;
  tokenizer: Tokenizer;
  dir: string;
}

export interface LoadOptions {
  /** The model's name in maps, counts and the API; default the folder's name. */
  name?: string;
  /** Progress in bytes: reading counts each shard's data, converting counts each tensor's raw bytes. */
  onProgress?: (done: number, total: number, what: string) => void;
  /** Convert to float32 (default true); false skips it for tools that need only raw tensors. */
  weights?: boolean;
  /**
   * Keep the raw tensors (default true); false lets go of them (and so of the shards' bytes) once they are
   * converted, for callers that compute with the float32 weights only. Needs `weights` (both false loads nothing).
   */
  raw?: boolean;
  /**
   * Read no tensor data: `tensors` reads each tensor from its shard when asked (the CUDA backend streams
   * them to the device, so host memory stays bounded by its staging). Implies weights: false, raw: false.
   */
  stream?: boolean;
  /**
   * bf16 attention projections, experts, embedding and lm head (qwen3_moe; a tied head one copy): converted to float32 (the default) or kept as stored
   * ('stored': half the memory, computed from the stored bits, bit-identical; with SIMD through the kernel's bf16 linear);
   * 'auto': stored where the float32 weights would pass `bf16AutoBytes` (bf16Policy).
   */
  bf16?: Bf16Choice;
  /**
   * For bf16 'auto': the bytes of float32 weights past which bf16 stays as stored. The CPU backend passes what its
   * SIMD kernel's memory may hold (backend/cpu/load-options.ts); without it 'auto' converts.
   */
  bf16AutoBytes?: number;
  /**
   * Leave the routed experts in the checkpoint (qwen3_moe with float, block-FP8 or 4-bit experts, mixtral, olmoe,
   * deepseek_v3; gpt-oss's stacked MXFP4 experts load as before):
   * each is a StoredExpert that the CPU backend reads straight into its banks, so the host never holds the
   * experts twice while the banks fill. Needs raw: false; `tensors` is then the shard files (close() it to
   * release them; a later read opens them again).
   */
  streamExperts?: boolean;
  /**
   * Where the bf16 projections and lm head kept as stored are read to (qwen3_moe loads with raw: false; the routed
   * experts go to the banks, an untied embedding stays on the heap): a factory called once per such load, when the
   * policy keeps bf16 as stored. The CPU backend gives its SIMD kernel's memory (backend/load-for.ts), so a backend
   * taking the weights computes on them in place (no copy beside the loaded matrices). Matrices it has no room for
   * stay on the heap.
   */
  bf16Memory?: () => Bf16Memory | undefined;
}

export type Bf16Choice = 'float32' | 'stored' | 'auto';

/**
 * Whether bf16 weights stay as stored. 'auto': when the float32 weights would pass `autoBytes` (the CPU backend's
 * SIMD kernel memory: at half the bytes the stored rows may still fit it, and run through the kernel's bf16 linear,
 * far faster than the JS loops at real layer shapes); small models keep float32, whose stacked q/k/v the threads
 * share out by tokens. Without a limit 'auto' converts.
 */
export function bf16Policy(choice: Bf16Choice | undefined, spec: ModelSpec, autoBytes = Infinity): 'float32' | 'stored' {
  if (choice === 'stored' || choice === 'float32') return choice;
  if (choice === undefined) return 'float32';
  let values = 0;
  for (const shape of expectedTensors(spec).values()) values += shape.reduce((a, b) => a * b, 1);
  return 4 * values > autoBytes ? 'stored' : 'float32';
}

const EMPTY = new Float32Array(0);

/** Weights with the right structure and no data, for `weights: false`. */
function emptyWeights(spec: ModelSpec): ModelWeights {
  const experts = Array.from({ length: spec.numExperts }, () => ({ gate: EMPTY, up: EMPTY, down: EMPTY }));
  const layer = { inputNorm: EMPTY, qProj: EMPTY, kProj: EMPTY, vProj: EMPTY, oProj: EMPTY, qNorm: EMPTY, kNorm: EMPTY, postAttnNorm: EMPTY, router: EMPTY, experts };
  return { embed: EMPTY, layers: Array.from({ length: spec.numLayers }, () => layer), finalNorm: EMPTY, lmHead: EMPTY };
}

export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<LoadedModel> {
  const root = resolve(dir);
  let spec = await loadConfig(root, opts.name);
  // Every header and the architecture are validated before a single weight byte is read.
  const layout = await openCheckpoint(root);
  const headers = new Map([...layout.tensors].map(([k, v]) => [k, { dtype: v.entry.dtype, shape: v.entry.shape, file: basename(v.shard.file) }]));
  checkArchitecture(spec, headers);
  checkQuantTensors(spec, headers);
  // The tokenizer is small: load it before the weights so a broken one fails fast.
  const tokenizer = await loadTokenizer(root, { eosTokenIds: spec.eosTokenIds });
  if (tokenizer.vocabSize > spec.vocabSize) {
    throw new ResidencyError('BAD_CHECKPOINT',
      `tokenizer.json has token ids up to ${tokenizer.vocabSize - 1} but config.json vocab_size is ${spec.vocabSize}: the tokenizer does not belong to this model`);
  }
  // Embedding rows past the tokenizer are padding (Qwen3 267, DeepSeek-V3 465 of ~130k-150k); many more means the
  // tokenizer of another model, whose outputs would mostly decode to nothing.
  if (spec.vocabSize - tokenizer.vocabSize > vocabPadding(spec.vocabSize)) {
    throw new ResidencyError('BAD_CHECKPOINT',
      `tokenizer.json has ${tokenizer.vocabSize} tokens but config.json vocab_size is ${spec.vocabSize}: more than ${vocabPadding(spec.vocabSize)} rows of padding, so the tokenizer does not belong to this model`);
  }

  // config.json without eos_token_id: the tokenizer's eos_token is the model's EOS. The spec must carry it
  // too, or the engine would generate through EOS while the server hides it from the text.
  if (spec.eosTokenIds.length === 0 && tokenizer.eosTokenIds.length > 0) {
    spec = Object.freeze({ ...spec, eosTokenIds: tokenizer.eosTokenIds });
  }

  if (opts.stream === true) {
    return { spec, raw: new Map(), weights: emptyWeights(spec), tensors: fileTensorSource(layout, spec.quantization), tokenizer, dir: root };
  }
  const convert = opts.weights ?? true;
  const keepRaw = opts.raw ?? true;
  if (!convert && !keepRaw) {
    throw new ResidencyError('BAD_ARGUMENT', 'loadModel: weights: false with raw: false would load no tensors; keep at least one');
  }
  if (convert && !keepRaw) return { spec, ...convertStreamed(spec, layout, opts), tokenizer, dir: root };
  const total = layout.dataBytes * (convert ? 2 : 1);
  let done = 0;
  const report = (bytes: number, what: string): void => {
    done += bytes;
    opts.onProgress?.(done, total, what);
  };
  opts.onProgress?.(0, total, 'opening');
  const raw = await readCheckpoint(layout, (n, shard) => report(n, `reading ${shard}`));
  const keepBf16 = bf16Policy(opts.bf16, spec, opts.bf16AutoBytes) === 'stored';
  const weights = convert ? toFloat32Weights(spec, raw, (name, n) => report(n, `converting ${name}`), { keepBf16 }) : emptyWeights(spec);
  if (convert && done < total) opts.onProgress?.(total, total, 'done'); // unconverted extras still count

  // Without raw, only the float32 arrays (fresh copies) survive this call: the shard buffers become garbage.
  const kept = keepRaw ? raw : new Map<string, RawTensor>();
  return { spec, raw: kept, weights, tensors: mapTensorSource(kept, spec.quantization), tokenizer, dir: root };
}

/** Reads 2-D BF16 tensors straight from `source` into `memory` (checked finite there), while it has room. */
function bf16Placer(source: TensorSource, memory: Bf16Memory): Bf16Placer {
  return (name) => {
    const t = source.info(name);
    if (t.dtype !== 'BF16' || t.shape.length !== 2) return undefined;
    const n = t.shape[0]! * t.shape[1]!;
    if (t.bytes !== 2 * n) throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}": ${t.bytes} bytes for a BF16 ${t.shape.join('x')} tensor, expected ${2 * n}`);
    const data = memory.u16(n);
    if (!data) return undefined;
    readBf16Checked(source, t, data);
    return bf16Matrix(t.shape[0]!, t.shape[1]!, data);
  };
}

/**
 * weights without raw: each tensor read from its shard and converted before the next is read, so host memory
 * holds the weights and one stored tensor, never the checkpoint beside its converted copy. Progress counts
 * each tensor's stored bytes once (read and converted).
 */
function convertStreamed(spec: ModelSpec, layout: CheckpointLayout, opts: LoadOptions): Pick<LoadedModel, 'raw' | 'weights' | 'tensors'> {
  const total = layout.dataBytes;
  let done = 0;
  opts.onProgress?.(0, total, 'opening');
  const source = fileTensorSource(layout, spec.quantization);
  // Experts named one tensor triple each stream (qwen3_moe float, block FP8 or 4-bit, mixtral, olmoe, deepseek_v3);
  // gpt-oss's stacked MXFP4 experts are assembled at load.
  const family = familyOf(spec.architecture);
  const stream = opts.streamExperts === true && (family ? family.streamsExperts : spec.quantization?.method !== 'mxfp4');
  let weights: ModelWeights;
  try {
    const keepBf16 = bf16Policy(opts.bf16, spec, opts.bf16AutoBytes) === 'stored';
    // Only qwen3_moe keeps bf16 as stored (the families convert): a memory for nothing else.
    const memory = keepBf16 && !family ? opts.bf16Memory?.() : undefined;
    weights = toFloat32Weights(spec, readOnGet(source), (name, n) => {
      done += n;
      opts.onProgress?.(done, total, `loading ${name}`);
    }, { keepBf16, freshBytes: true, ...(stream ? { streamExperts: source } : {}), ...(memory ? { placeBf16: bf16Placer(source, memory) } : {}) });
    if (memory) weights = { ...weights, bf16Memory: memory };
  } catch (e) {
    source.close();
    throw e;
  }
  if (done < total) opts.onProgress?.(total, total, 'done'); // streamed experts, unconverted extras and padding still count
  if (stream) return { raw: new Map(), weights, tensors: source };
  source.close();
  return { raw: new Map(), weights, tensors: mapTensorSource(new Map(), spec.quantization) };
}
