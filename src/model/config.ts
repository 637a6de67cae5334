// Parses a checkpoint's config.json into a ModelSpec (qwen3_moe here, other families in families/), refusing
// options the engine does not implement rather than silently computing a different model.

import { basename, join, resolve } from 'node:path';
import { z } from 'zod';
import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from './spec.ts';
import { familyOf, supportedModelTypes } from './families/index.ts';
import { badConfig, checkTotalExperts, CONFIG_BOUNDS, eosTokenIds, headDimOf, parseFields, sharedFields, sized } from './families/common.ts';
import { parseQuantization } from './quant-config.ts';
import { readRegularFile } from '../util/regular-file.ts';

// Field types only; cross-field rules and unsupported options are checked after. Unknown keys pass:
// configs carry many training-only fields (initializer_range, router_aux_loss_coef, ...).
const Qwen3MoeConfig = z.looseObject({
  model_type: z.string(),
  vocab_size: sized(CONFIG_BOUNDS.vocab),
  hidden_size: sized(CONFIG_BOUNDS.hidden),
  num_hidden_layers: sized(CONFIG_BOUNDS.layers),
  num_attention_heads: sized(CONFIG_BOUNDS.heads),
  num_key_value_heads: sized(CONFIG_BOUNDS.heads),
  head_dim: sized(CONFIG_BOUNDS.headDim).nullish(),
  moe_intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  num_experts: sized(CONFIG_BOUNDS.experts).nullish(),
  num_local_experts: sized(CONFIG_BOUNDS.experts).nullish(),
  num_experts_per_tok: sized(CONFIG_BOUNDS.experts),
  norm_topk_prob: z.boolean().optional(),
  rms_norm_eps: z.number().positive().optional(),
  rope_theta: z.number().positive().nullish(),
  rope_parameters: z.looseObject({
    rope_theta: z.number().positive().optional(),
    rope_type: z.string().optional(),
  }).nullish(),
  rope_scaling: z.unknown().optional(),
  ...sharedFields,
  use_sliding_window: z.boolean().optional(),
  sliding_window: z.number().int().nullish(),
  mlp_only_layers: z.array(z.number().int()).optional(),
  decoder_sparse_step: z.number().int().optional(),
  shared_expert_intermediate_size: z.number().int().nonnegative().optional(),
  num_shared_experts: z.number().int().nonnegative().optional(),
  n_shared_experts: z.number().int().nonnegative().nullish(),
  quantization_config: z.unknown().optional(),
});
type Qwen3MoeConfig = z.infer<typeof Qwen3MoeConfig>;

function unsupported(key: string, message: string): ResidencyError {
  return new ResidencyError('UNSUPPORTED_MODEL', `config.json: ${key}: ${message}`);
}

/** HF defaults (transformers Qwen3MoeConfig) for the fields a real config may leave out. */
const DEFAULTS = { rmsNormEps: 1e-6, ropeTheta: 10000, maxPositions: 32768 } as const;

/** Refuses every option that changes the computation in a way the engine does not implement. */
function checkSupported(c: Qwen3MoeConfig): void {
  if (c.use_sliding_window === true) {
    throw unsupported('use_sliding_window', `sliding-window attention (sliding_window=${c.sliding_window ?? 'null'}) is not supported; only full attention`);
  }
  if (c.mlp_only_layers && c.mlp_only_layers.length > 0) {
    throw unsupported('mlp_only_layers', `dense MLP layers ${JSON.stringify(c.mlp_only_layers)} are not supported; every layer must be MoE`);
  }
  if (c.decoder_sparse_step !== undefined && c.decoder_sparse_step !== 1) {
    throw unsupported('decoder_sparse_step', `${c.decoder_sparse_step} is not supported; every layer must be MoE (decoder_sparse_step 1)`);
  }
  if (c.rope_scaling !== undefined && c.rope_scaling !== null) {
    throw unsupported('rope_scaling', `RoPE scaling ${JSON.stringify(c.rope_scaling)} is not supported; only plain RoPE (rope_scaling null)`);
  }
  const ropeType = c.rope_parameters?.rope_type;
  if (ropeType !== undefined && ropeType !== 'default') {
    throw unsupported('rope_parameters.rope_type', `"${ropeType}" is not supported; only "default"`);
  }
  for (const key of ['shared_expert_intermediate_size', 'num_shared_experts', 'n_shared_experts'] as const) {
    const v = c[key];
    if (typeof v === 'number' && v > 0) throw unsupported(key, `shared experts (${key}=${v}) are not supported`);
  }
  if (c.attention_bias === true) throw unsupported('attention_bias', 'attention projections with bias are not supported');
  if (c.hidden_act !== undefined && c.hidden_act !== 'silu') {
    throw unsupported('hidden_act', `"${c.hidden_act}" is not supported; only "silu" (SwiGLU experts)`);
  }
}

/** Two spellings of one value (old hub / new transformers): take whichever is given, refuse a conflict. */
function eitherSpelling(a: [string, number | null | undefined], b: [string, number | null | undefined]): number | undefined {
  const [ka, va] = a;
  const [kb, vb] = b;
  if (va != null && vb != null && va !== vb) throw badConfig(`${ka}=${va} and ${kb}=${vb} disagree`);
  return va ?? vb ?? undefined;
}

/** Parses config.json's object into a frozen ModelSpec named `name`. */
export function parseConfig(json: unknown, name: string): ModelSpec {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw badConfig('must be a JSON object');
  const modelType = (json as Record<string, unknown>)['model_type'];
  // model_type first: another architecture's config would otherwise fail on a field it does not have.
  const family = familyOf(modelType);
  if (family) return family.parse(json, name);
  if (modelType !== 'qwen3_moe') {
    const known = supportedModelTypes().map((t) => `"${t}"`).join(', ');
    throw new ResidencyError('UNSUPPORTED_MODEL', `config.json: model_type: ${JSON.stringify(modelType)} is not supported; only ${known}`);
  }
  const c = parseFields(Qwen3MoeConfig, json);
  checkSupported(c);

  const numExperts = eitherSpelling(['num_experts', c.num_experts], ['num_local_experts', c.num_local_experts]);
  if (numExperts === undefined) throw badConfig('field num_experts (or num_local_experts): required positive integer, missing');
  const ropeTheta = eitherSpelling(['rope_theta', c.rope_theta], ['rope_parameters.rope_theta', c.rope_parameters?.rope_theta]) ?? DEFAULTS.ropeTheta;
  checkTotalExperts(c.num_hidden_layers, numExperts);
  if (c.num_experts_per_tok > numExperts) {
    throw badConfig(`field num_experts_per_tok: ${c.num_experts_per_tok} exceeds the ${numExperts} experts per layer`);
  }
  const headDim = headDimOf(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim);
  if (headDim % 2 !== 0) {
    throw badConfig(`field head_dim: ${headDim}${c.head_dim == null ? ` (hidden_size / num_attention_heads)` : ''} must be even: RoPE rotates the two halves of each head`);
  }

  // Block FP8 (Qwen3-*-FP8) and the 4-bit formats of Qwen's GPTQ-Int4 and the hub's AWQ and compressed-tensors copies.
  const quantization = parseQuantization('qwen3_moe', c.quantization_config, ['fp8', 'gptq', 'awq', 'compressed-tensors']);

  return Object.freeze({
    architecture: 'qwen3_moe',
    name,
    vocabSize: c.vocab_size,
    hiddenSize: c.hidden_size,
    numLayers: c.num_hidden_layers,
    numHeads: c.num_attention_heads,
    numKvHeads: c.num_key_value_heads,
    headDim,
    numExperts,
    topK: c.num_experts_per_tok,
    expertIntermediate: c.moe_intermediate_size,
    normTopkProb: c.norm_topk_prob ?? false,
    rmsNormEps: c.rms_norm_eps ?? DEFAULTS.rmsNormEps,
    ropeTheta,
    tieWordEmbeddings: c.tie_word_embeddings ?? false,
    maxPositions: c.max_position_embeddings ?? DEFAULTS.maxPositions,
    bosTokenId: c.bos_token_id ?? null,
    eosTokenIds: eosTokenIds(c.eos_token_id),
    ...(quantization ? { quantization } : {}),
  } satisfies ModelSpec);
}

/** Reads `dir/config.json`; the spec's name is `name` or the folder's name. */
export async function loadConfig(dir: string, name?: string): Promise<ModelSpec> {
  const path = join(dir, 'config.json');
  let text: string;
  try {
    text = await readRegularFile(path);
  } catch (e) {
    throw new ResidencyError('BAD_CONFIG', `cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw badConfig(`not valid JSON: ${(e as Error).message}`);
  }
  return parseConfig(json, name ?? basename(resolve(dir)));
}
