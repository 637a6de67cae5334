// What the family modules share: config field types, errors that name the field, the fields every family
// spells alike (sizes, heads, norms, RoPE, tokens), and the float32 reads of a family's tensors.

import { z } from 'zod';
import { ResidencyError } from '../../errors.ts';
import { EMBED, FINAL_NORM, LM_HEAD } from '../tensor-names.ts';
import { bf16Bits, checkBf16Finite, tensorToFloat32 } from '../float-convert.ts';
import type { ModelSpec, YarnSpec } from '../spec.ts';
import type { ExpertWeights, LayerWeights, ModelWeights, RawTensor, VocabMatrix } from '../weights.ts';
import type { TensorSource } from '../tensor-source.ts';
import { bf16Matrix, type Bf16Matrix, type Matrix } from '../quant.ts';
import { isInt4, type QuantSpec } from '../quant-config.ts';
import { fp8Matrix, fp8ScaleName } from '../quant-read.ts';
import { int4Module } from '../int4-config.ts';
import { int4Matrix, int4StoredShape } from '../int4-repack.ts';

export const posInt = z.number().int().positive();
const tokenId = z.number().int().nonnegative();

/**
 * Upper bounds of config sizes, checked before anything is sized by them (a 1e8-position config grew to 14 GB
 * of RoPE tables; a million layers ran into the tensor map's size limit after 40 s). Each sits far above the
 * released checkpoints of the families served here, so only a corrupt or hostile config meets one.
 */
export const CONFIG_BOUNDS = Object.freeze({
  vocab: 1 << 22,
  hidden: 1 << 16,
  layers: 1024,
  heads: 1024,
  headDim: 4096,
  experts: 16_384,
  intermediate: 1 << 20,
  /** Qwen's 1M-context releases hold 1,010,000; a longer context can be cut with --max-model-len only once it loads. */
  positions: 1 << 22,
  /** Routed experts in the whole model (layers x experts per layer): each is three tensors to look up. */
  totalExperts: 1 << 18,
});

/** A positive integer of at most `max`; the message says the bound (parseFields adds the field and value). */
export function sized(max: number) {
  return posInt.max(max, { error: `expected at most ${max.toLocaleString('en-US')} (far above any released model: a corrupt config?)` });
}

/** Refuses a model of more routed experts than CONFIG_BOUNDS.totalExperts (each field may be within its own bound). */
export function checkTotalExperts(layers: number, experts: number): void {
  if (layers * experts > CONFIG_BOUNDS.totalExperts) {
    throw badConfig(`num_hidden_layers ${layers} x ${experts} experts per layer = ${layers * experts} routed experts: expected at most ${CONFIG_BOUNDS.totalExperts.toLocaleString('en-US')} (far above any released model: a corrupt config?)`);
  }
}

/** Fields that every config.json, qwen3_moe's included, spells and types alike (a run of them, in this order). */
export const sharedFields = {
  tie_word_embeddings: z.boolean().optional(),
  max_position_embeddings: sized(CONFIG_BOUNDS.positions).optional(),
  bos_token_id: tokenId.nullish(),
  eos_token_id: z.union([tokenId, z.array(tokenId)], { error: 'expected a token id or an array of token ids' }).nullish(),
  hidden_act: z.string().optional(),
  attention_bias: z.boolean().optional(),
};

/** Fields every family's config.json spells the same way (types only; rules are checked after). */
export const baseFields = {
  model_type: z.string(),
  vocab_size: sized(CONFIG_BOUNDS.vocab),
  hidden_size: sized(CONFIG_BOUNDS.hidden),
  num_hidden_layers: sized(CONFIG_BOUNDS.layers),
  num_attention_heads: sized(CONFIG_BOUNDS.heads),
  num_key_value_heads: sized(CONFIG_BOUNDS.heads).nullish(),
  head_dim: sized(CONFIG_BOUNDS.headDim).nullish(),
  num_experts_per_tok: sized(CONFIG_BOUNDS.experts),
  rms_norm_eps: z.number().positive().optional(),
  rope_theta: z.number().positive().nullish(),
  rope_parameters: z.looseObject({}).nullish(),
  rope_scaling: z.looseObject({}).nullish(),
  partial_rotary_factor: z.number().nullish(),
  ...sharedFields,
  quantization_config: z.unknown().optional(),
};

export function badConfig(message: string): ResidencyError {
  return new ResidencyError('BAD_CONFIG', `config.json: ${message}`);
}

export function unsupported(type: string, key: string, message: string): ResidencyError {
  return new ResidencyError('UNSUPPORTED_MODEL', `config.json (${type}): ${key}: ${message}`);
}

/** Parses with `schema`, naming the first bad field and what it held. */
export function parseFields<T extends z.ZodType>(schema: T, json: unknown): z.infer<T> {
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.join('.') || '(root)';
    const got = issue.path.reduce<unknown>((o, k) => (o as Record<PropertyKey, unknown> | undefined)?.[k as PropertyKey], json);
    throw badConfig(`field ${field}: ${issue.message} (got ${JSON.stringify(got) ?? 'nothing'})`);
  }
  return parsed.data;
}

type Base = z.infer<z.ZodObject<typeof baseFields>>;

/** The RoPE parameters (rope_parameters, or the older rope_scaling) with theta and type resolved. */
export function ropeOf(type: string, c: Base): { theta: number; ropeType: string; params: Record<string, unknown> } {
  const params = (c.rope_parameters ?? c.rope_scaling ?? {}) as Record<string, unknown>;
  const inner = params['rope_theta'];
  if (inner !== undefined && typeof inner !== 'number') throw badConfig(`field rope_parameters.rope_theta: expected a number (got ${JSON.stringify(inner)})`);
  if (c.rope_theta != null && inner !== undefined && inner !== c.rope_theta) {
    throw badConfig(`rope_theta=${c.rope_theta} and rope_parameters.rope_theta=${inner} disagree`);
  }
  const ropeType = String(params['rope_type'] ?? params['type'] ?? 'default');
  const prf = c.partial_rotary_factor ?? (params['partial_rotary_factor'] as number | undefined);
  if (prf != null && prf !== 1) throw unsupported(type, 'partial_rotary_factor', `${prf} is not supported; RoPE must cover the whole rotary width`);
  return { theta: c.rope_theta ?? (inner as number | undefined) ?? 10000, ropeType, params };
}

/** YaRN parameters as transformers reads them (`_compute_yarn_parameters`, attention factor by get_mscale). */
export function yarnOf(type: string, p: Record<string, unknown>, maxPositions: number): YarnSpec {
  const num = (key: string): number | undefined => {
    const v = p[key];
    if (v == null) return undefined;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw badConfig(`field rope_parameters.${key}: expected a number (got ${JSON.stringify(v)})`);
    return v;
  };
  // Scales and lengths: a zero or negative one gives NaN or all-zero rotations, not an error further on.
  const positive = (key: string): number | undefined => {
    const v = num(key);
    if (v !== undefined && !(v > 0)) throw badConfig(`field rope_parameters.${key}: expected a positive number (got ${v})`);
    return v;
  };
  const original = positive('original_max_position_embeddings');
  if (original === undefined) throw badConfig('field rope_parameters.original_max_position_embeddings: YaRN needs it');
  const factor = positive('factor') ?? maxPositions / original;
  // DeepSeek's mscale and mscale_all_dim (both given): cos and sin times their ratio; the softmax's share is the
  // family's (deepseekSoftmaxScale).
  const mscale = num('mscale'), mscaleAllDim = num('mscale_all_dim');
  const truncate = p['truncate'] ?? true;
  if (typeof truncate !== 'boolean') throw badConfig(`field rope_parameters.truncate: expected a boolean (got ${JSON.stringify(truncate)})`);
  return {
    factor,
    originalMaxPositions: original,
    betaFast: positive('beta_fast') || 32,
    betaSlow: positive('beta_slow') || 1,
    truncate,
    attentionFactor: positive('attention_factor') ?? (mscale && mscaleAllDim ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim) : yarnMscale(factor)),
  };
}

/** YaRN's magnitude correction at a context `factor` (transformers' get_mscale / yarn_get_mscale): 1 up to factor 1. */
export function yarnMscale(factor: number, mscale = 1): number {
  return factor <= 1 ? 1 : 0.1 * mscale * Math.log(factor) + 1;
}

/** The fields of ModelSpec every family fills the same way. */
export function baseSpec(type: string, c: Base, name: string): Omit<ModelSpec, 'architecture' | 'numExperts' | 'expertIntermediate' | 'normTopkProb'> {
  if (c.hidden_act !== undefined && c.hidden_act !== 'silu') {
    throw unsupported(type, 'hidden_act', `"${c.hidden_act}" is not supported; only "silu" (SwiGLU)`);
  }
  const numKvHeads = c.num_key_value_heads ?? c.num_attention_heads;
  const headDim = headDimOf(c.hidden_size, c.num_attention_heads, numKvHeads, c.head_dim);
  if (headDim % 2 !== 0) throw badConfig(`field head_dim: ${headDim} must be even: RoPE rotates pairs`);
  return {
    name,
    vocabSize: c.vocab_size,
    hiddenSize: c.hidden_size,
    numLayers: c.num_hidden_layers,
    numHeads: c.num_attention_heads,
    numKvHeads,
    headDim,
    topK: c.num_experts_per_tok,
    rmsNormEps: c.rms_norm_eps ?? 1e-6,
    ropeTheta: ropeOf(type, c).theta,
    tieWordEmbeddings: c.tie_word_embeddings ?? false,
    maxPositions: c.max_position_embeddings ?? 4096,
    bosTokenId: c.bos_token_id ?? null,
    eosTokenIds: eosTokenIds(c.eos_token_id),
  };
}

/**
 * Refuses kv heads that do not divide the heads; the head size is head_dim, or when absent hidden_size /
 * heads (refused unless whole). Whether it is even is the caller's check (their messages differ).
 */
export function headDimOf(hidden: number, heads: number, kvHeads: number, headDim: number | null | undefined): number {
  if (heads % kvHeads !== 0) throw badConfig(`field num_key_value_heads: ${kvHeads} must divide num_attention_heads ${heads}`);
  if (headDim != null) return headDim;
  if (hidden % heads !== 0) throw badConfig(`field head_dim: absent, and hidden_size ${hidden} is not divisible by num_attention_heads ${heads}`);
  return hidden / heads;
}

/** eos_token_id (absent, one id or a list) as a frozen list. */
export function eosTokenIds(eos: number | readonly number[] | null | undefined): readonly number[] {
  return Object.freeze(eos == null ? [] : typeof eos === 'number' ? [eos] : [...eos]);
}

/** Refuses a top-k larger than the experts of a layer. */
export function checkTopK(k: number, experts: number): void {
  if (k > experts) throw badConfig(`field num_experts_per_tok: ${k} exceeds the ${experts} experts per layer`);
}

/** Refuses a quantization_config: only bf16/f16/f32 checkpoints (gpt-oss's MXFP4 is read by its module). */
export function refuseQuantized(type: string, q: unknown): void {
  if (q !== undefined && q !== null) {
    throw unsupported(type, 'quantization_config', 'quantized checkpoints of this family are not supported; use a BF16/F16/F32 checkpoint');
  }
}

/** Reads a bf16 tensor kept as stored straight into memory of the loader's choosing, or undefined (not 2-D BF16, or no room). */
export type Bf16Placer = (name: string) => Bf16Matrix | undefined;

/**
 * Reads of a checkpoint's tensors by name, reporting each one's raw size: float32 (a NaN or infinity
 * refused), and `matrix` for a linear weight, kept as stored when it is block FP8 (quant-read.ts checks it),
 * repacked into an Int4Matrix when the config stores it in 4 bits (int4-repack.ts), or, with `keepBf16`, bf16. `freshBytes`: every get of `raw` returns bytes of their own (readOnGet), so a bf16
 * matrix kept as stored is those bytes, checked in place, rather than a second copy of them. `table` reads the
 * embedding and lm head (float32, or with `keepBf16` bf16 as stored). `placeBf16`: where such bf16 matrices go.
 */

export function tensorReader(raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void, quant?: QuantSpec, keepBf16 = false, freshBytes = false, placeBf16?: Bf16Placer) {
  const placed = (name: string): Bf16Matrix | undefined => {
    const m = keepBf16 && placeBf16 ? placeBf16(name) : undefined;
    if (m) onTensor?.(name, 2 * m.data.length);
    return m;
  };
  const rawOf = (name: string): RawTensor => {
    const t = raw.get(name);
    if (!t) throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}" is missing`);
    onTensor?.(name, t.bytes.length);
    return t;
  };
  const f32 = (name: string): Float32Array => tensorToFloat32(rawOf(name), { finite: true });
  const bf16 = (t: RawTensor): Bf16Matrix => {
    const [rows, cols] = t.shape as [number, number];
    return bf16Matrix(rows, cols, freshBytes ? ownBf16Bits(t) : bf16Bits(t));
  };
  /** A linear weight the config stores in 4 bits (GPTQ, AWQ, compressed-tensors): read from its stored tensors. */
  const isInt4Weight = (name: string): boolean => isInt4(quant) && name.endsWith('.weight') && int4Module(quant, name.slice(0, -'.weight'.length));
  const int4 = (name: string): Matrix => {
    if (!isInt4(quant)) throw new ResidencyError('INTERNAL', `tensorReader: ${name} is not a 4-bit weight`);
    const got = new Map<string, RawTensor>(); // each stored tensor read once for this matrix
    const get = (n: string): RawTensor | undefined => {
      if (!got.has(n) && raw.has(n)) got.set(n, rawOf(n));
      return got.get(n);
    };
    const [rows, cols] = int4StoredShape(quant, name, (n) => get(n)?.shape);
    return int4Matrix(quant, name, rows, cols, get);
  };
  const matrix = (name: string): Matrix => {
    if (isInt4Weight(name)) return int4(name);
    const t = rawOf(name);
    if (keepBf16 && t.dtype === 'BF16') return bf16(t);
    if (t.dtype !== 'F8_E4M3') return tensorToFloat32(t, { finite: true });
    if (quant?.method !== 'fp8') throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}" is F8_E4M3 but config.json declares no fp8 quantization`);
    return fp8Matrix(t, rawOf(fp8ScaleName(name)), quant.blockSize);
  };
  /** The embedding or lm head: with `keepBf16` a bf16 one stays as stored (as the projections do), else float32. */
  const table = (name: string): VocabMatrix => {
    const t = rawOf(name);
    return keepBf16 && t.dtype === 'BF16' ? bf16(t) : tensorToFloat32(t, { finite: true });
  };
  // What the CPU kernel computes with (projections, the lm head): through `placeBf16` where it takes them. Routed
  // experts (read into the banks) and an untied embedding (looked up a row at a time) take the readers above.
  const projection = (name: string): Matrix => (isInt4Weight(name) ? int4(name) : placed(name) ?? matrix(name));
  const head = (name: string): VocabMatrix => placed(name) ?? table(name);
  return { raw: rawOf, f32, matrix, table, projection, head };
}

export type TensorShapes = Map<string, readonly number[]>;
type SwigluNames = { gate: string; up: string; down: string };
type ProjNames = { qProj: string; kProj: string; vProj: string; oProj: string };

/** A tensor map in checkpoint order: the embedding, each layer's tensors (`layer`), the final norm, an untied head. */
export function tensorMap(spec: ModelSpec, layer: (out: TensorShapes, l: number) => void): TensorShapes {
  const { vocabSize: V, hiddenSize: H } = spec;
  const out: TensorShapes = new Map();
  out.set(EMBED, [V, H]);
  for (let l = 0; l < spec.numLayers; l++) layer(out, l);
  out.set(FINAL_NORM, [H]);
  if (!spec.tieWordEmbeddings) out.set(LM_HEAD, [V, H]);
  return out;
}

/** Grouped-query attention's projections: q [heads*d][H], k and v [kvHeads*d][H], o [H][heads*d]. */
export function attentionShapes(out: TensorShapes, n: ProjNames, spec: ModelSpec): void {
  const { hiddenSize: H, numHeads, numKvHeads, headDim: d } = spec;
  out.set(n.qProj, [numHeads * d, H]);
  out.set(n.kProj, [numKvHeads * d, H]);
  out.set(n.vProj, [numKvHeads * d, H]);
  out.set(n.oProj, [H, numHeads * d]);
}

/** A layer's routed experts, each a SwiGLU MLP of spec.expertIntermediate units. */
export function expertShapes(out: TensorShapes, expert: (e: number) => SwigluNames, spec: ModelSpec): void {
  for (let e = 0; e < spec.numExperts; e++) swigluShapes(out, expert(e), spec.expertIntermediate, spec.hiddenSize);
}

/**
 * The weights in tensorMap's order: the embedding, each layer's (`layer`), the final norm, an untied head. `table`
 * reads the embedding and head (default float32; tensorReader's `table` keeps bf16 as stored); tied, the head
 * is the embedding's one copy.
 */
export function modelWeights(spec: ModelSpec, f32: (n: string) => Float32Array, layer: (l: number) => LayerWeights, table: (n: string) => VocabMatrix = f32): ModelWeights {
  const embed = table(EMBED);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) layers.push(layer(l));
  const finalNorm = f32(FINAL_NORM);
  return { embed, layers, finalNorm, lmHead: spec.tieWordEmbeddings ? embed : table(LM_HEAD) };
}

/** Grouped-query attention's projections, read in the order q, k, v, o. */
export function attentionWeights(f32: (n: string) => Matrix, n: ProjNames): Pick<LayerWeights, 'qProj' | 'kProj' | 'vProj' | 'oProj'> {
  return { qProj: f32(n.qProj), kProj: f32(n.kProj), vProj: f32(n.vProj), oProj: f32(n.oProj) };
}

/** A layer's routed experts, read in expert order. */
export function expertWeights(f32: (n: string) => Matrix, expert: (e: number) => SwigluNames, spec: ModelSpec): ExpertWeights[] {
  return Array.from({ length: spec.numExperts }, (_, e) => swigluWeights(f32, expert(e)));
}

/** A SwiGLU MLP's three tensors (gate [I][H], up [I][H], down [H][I]). */
export function swigluShapes(out: TensorShapes, names: SwigluNames, I: number, H: number): void {
  out.set(names.gate, [I, H]);
  out.set(names.up, [I, H]);
  out.set(names.down, [H, I]);
}

/**
 * A layer's routed experts left in `source` (loadModel's streamExperts: nothing read here, a backend reads each
 * into its banks: StoredExpert), in place of expertWeights. `keepBf16`: bf16 experts stay as stored in the rows.
 */
export function storedExperts(source: TensorSource, expert: (e: number) => SwigluNames, spec: ModelSpec, keepBf16 = false): ExpertWeights[] {
  const q = spec.quantization;
  const fp8 = q?.method === 'fp8' ? { fp8Block: q.blockSize } : isInt4(q) ? { int4: q } : {};
  return Array.from({ length: spec.numExperts }, (_, e) => ({ gate: EMPTY, up: EMPTY, down: EMPTY, stored: { source, ...expert(e), keepBf16, ...fp8 } }));
}

/** What a family's weight assembly may be asked beyond the raw tensors. */
export interface WeightOptions {
  /** Leave the routed experts in this source (storedExperts) instead of reading them. */
  readonly streamExperts?: TensorSource;
}

export function swigluWeights(f32: (n: string) => Matrix, names: SwigluNames): ExpertWeights {
  return { gate: f32(names.gate), up: f32(names.up), down: f32(names.down) };
}

export const EMPTY = new Float32Array(0);

/** A BF16 tensor's bytes, which it alone holds (a whole, aligned buffer), as its bit patterns: no copy. */
function ownBf16Bits(t: RawTensor): Uint16Array {
  const b = t.bytes;
  if (b.byteOffset !== 0 || b.byteLength !== b.buffer.byteLength) return bf16Bits(t);
  const bits = new Uint16Array(b.buffer, 0, b.byteLength >> 1);
  checkBf16Finite(t, bits);
  return bits;
}
