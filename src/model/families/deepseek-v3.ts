// DeepSeek-V3 (model_type deepseek_v3; R1, V3.1 and Kimi K2 share it): multi-head latent attention (low-rank
// q and kv projections with their norms, interleaved RoPE on a decoupled part), the first
// first_k_dense_replace layers dense, then MoE layers with a group-limited sigmoid router (noaux_tc) and
// shared experts beside the routed ones.

import { z } from 'zod';
import { parseQuantization } from '../quant-config.ts';
import type { ModelSpec } from '../spec.ts';
import type { ModelWeights, RawTensor } from '../weights.ts';
import {
  badConfig, baseFields, baseSpec, checkTopK, EMPTY, expertShapes, expertWeights, modelWeights, parseFields, posInt, ropeOf,
  swigluShapes, swigluWeights, tensorMap, tensorReader, unsupported, yarnMscale, yarnOf, type TensorShapes,
  storedExperts, type WeightOptions,
  CONFIG_BOUNDS, checkTotalExperts, sized,
} from './common.ts';

const T = 'deepseek_v3';

const DeepseekV3Config = z.looseObject({
  ...baseFields,
  intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  moe_intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  n_routed_experts: sized(CONFIG_BOUNDS.experts),
  n_shared_experts: z.number().int().nonnegative().nullish(),
  first_k_dense_replace: z.number().int().nonnegative().optional(),
  n_group: posInt.optional(),
  topk_group: posInt.optional(),
  routed_scaling_factor: z.number().positive().optional(),
  norm_topk_prob: z.boolean().optional(),
  topk_method: z.string().optional(),
  scoring_func: z.string().optional(),
  q_lora_rank: sized(CONFIG_BOUNDS.hidden).nullish(),
  kv_lora_rank: sized(CONFIG_BOUNDS.hidden),
  qk_nope_head_dim: sized(CONFIG_BOUNDS.headDim),
  qk_rope_head_dim: sized(CONFIG_BOUNDS.headDim),
  v_head_dim: sized(CONFIG_BOUNDS.headDim),
  rope_interleave: z.boolean().optional(),
  num_nextn_predict_layers: z.number().int().nonnegative().optional(),
});

export function parseDeepseekV3(json: unknown, name: string): ModelSpec {
  const c = parseFields(DeepseekV3Config, json);
  // num_nextn_predict_layers: the multi-token-prediction layers stored after the last layer (model.layers.61.* in
  // DeepSeek-V3 / R1) serve speculative decoding only; they are not read, as transformers does not read them.
  if (c.q_lora_rank == null) throw unsupported(T, 'q_lora_rank', 'a full-rank q projection (q_lora_rank null, as DeepSeek-V2-Lite) is not supported');
  if (c.topk_method !== undefined && c.topk_method !== 'noaux_tc') throw unsupported(T, 'topk_method', `"${c.topk_method}" is not supported; only "noaux_tc"`);
  if (c.scoring_func !== undefined && c.scoring_func !== 'sigmoid') throw unsupported(T, 'scoring_func', `"${c.scoring_func}" is not supported; only "sigmoid"`);
  if (c.attention_bias === true) throw unsupported(T, 'attention_bias', 'attention projections with bias are not supported');
  const rope = ropeOf(T, c);
  if (rope.ropeType !== 'default' && rope.ropeType !== 'yarn') throw unsupported(T, 'rope_parameters.rope_type', `"${rope.ropeType}" is not supported; only "default" and "yarn"`);
  if (c.qk_rope_head_dim % 2 !== 0) throw badConfig(`field qk_rope_head_dim: ${c.qk_rope_head_dim} must be even: RoPE rotates pairs`);
  // Block FP8 as the hub's DeepSeek-V3 / R1 / Kimi K2 checkpoints store it (every linear but the router); 4-bit
  // experts as Kimi K2 Thinking's compressed-tensors (int4, groups of 32) and GPTQ / AWQ copies store them.
  const quantization = parseQuantization(T, c.quantization_config, ['fp8', 'gptq', 'awq', 'compressed-tensors']);
  const E = c.n_routed_experts;
  checkTopK(c.num_experts_per_tok, E);
  checkTotalExperts(c.num_hidden_layers, E);
  const nGroup = c.n_group ?? 1;
  const topkGroup = c.topk_group ?? 1;
  if (E % nGroup !== 0) throw badConfig(`field n_group: ${nGroup} must divide n_routed_experts ${E}`);
  if (topkGroup > nGroup) throw badConfig(`field topk_group: ${topkGroup} exceeds n_group ${nGroup}`);
  if (E / nGroup < 2) throw badConfig(`field n_group: ${nGroup} leaves fewer than 2 experts per group (a group is scored by its best two)`);
  if (c.num_experts_per_tok > (E / nGroup) * topkGroup) {
    throw badConfig(`field num_experts_per_tok: ${c.num_experts_per_tok} exceeds the ${(E / nGroup) * topkGroup} experts of the ${topkGroup} groups kept`);
  }
  const firstDense = c.first_k_dense_replace ?? 0;
  const moeLayers = Array.from({ length: c.num_hidden_layers }, (_, l) => l).filter((l) => l >= firstDense);
  if (moeLayers.length === 0) throw unsupported(T, 'first_k_dense_replace', `${firstDense} leaves no MoE layer of ${c.num_hidden_layers}`);
  const shared = c.n_shared_experts ?? 0;
  const base = baseSpec(T, { ...c, head_dim: c.qk_rope_head_dim, num_key_value_heads: c.num_attention_heads }, name);
  return Object.freeze({
    architecture: T,
    ...base,
    numExperts: E,
    expertIntermediate: c.moe_intermediate_size,
    normTopkProb: c.norm_topk_prob ?? false,
    moeLayers: Object.freeze(moeLayers),
    qkNorm: 'none',
    router: { kind: 'sigmoid_group', nGroup, topkGroup, scalingFactor: c.routed_scaling_factor ?? 1 },
    rope: { interleaved: c.rope_interleave ?? true, ...(rope.ropeType === 'yarn' ? { yarn: yarnOf(T, rope.params, base.maxPositions) } : {}) },
    mla: {
      qLoraRank: c.q_lora_rank, kvLoraRank: c.kv_lora_rank, qkNopeDim: c.qk_nope_head_dim, vHeadDim: c.v_head_dim,
      softmaxScale: deepseekSoftmaxScale(c.qk_nope_head_dim + c.qk_rope_head_dim, rope.ropeType, rope.params),
    },
    ...(moeLayers.length < c.num_hidden_layers ? { denseIntermediate: c.intermediate_size } : {}),
    ...(shared > 0 ? { sharedIntermediate: c.moe_intermediate_size * shared } : {}),
    ...(quantization ? { quantization } : {}),
  } satisfies ModelSpec);
}

/**
 * transformers' DeepseekV3Attention.scaling (5.17 yarn_apply_mscale): qk^-0.5, and under a RoPE other than the default
 * with mscale_all_dim, times yarnMscale(factor, mscale_all_dim)^2, in that order (the kernels take it as float32).
 * DeepSeek-V3 / R1 carry factor 40 and mscale = mscale_all_dim = 1: cos and sin stay unscaled (the ratio, yarnOf) and
 * the softmax sharpens by 1.87x.
 */
export function deepseekSoftmaxScale(qk: number, ropeType: string, params: Record<string, unknown>): number {
  const scale = qk ** -0.5;
  const mscaleAllDim = params['mscale_all_dim'], factor = params['factor'];
  if (ropeType === 'default' || !mscaleAllDim) return scale;
  if (typeof mscaleAllDim !== 'number' || !Number.isFinite(mscaleAllDim)) throw badConfig(`field rope_parameters.mscale_all_dim: expected a number (got ${JSON.stringify(mscaleAllDim)})`);
  // (transformers refuses a YaRN without factor; its DeepSeek attention reads the factor given, not one derived)
  if (typeof factor !== 'number' || !(factor > 0)) throw badConfig(`field rope_parameters.factor: expected a positive number with mscale_all_dim (got ${JSON.stringify(factor) ?? 'nothing'})`);
  const m = yarnMscale(factor, mscaleAllDim);
  return scale * m * m;
}

/** Hub tensor names of one DeepSeek-V3 layer. */
export function deepseekV3Names(l: number) {
  const p = `model.layers.${l}`;
  const a = `${p}.self_attn`;
  const mlp = (q: string) => ({ gate: `${q}.gate_proj.weight`, up: `${q}.up_proj.weight`, down: `${q}.down_proj.weight` });
  return {
    inputNorm: `${p}.input_layernorm.weight`,
    postAttnNorm: `${p}.post_attention_layernorm.weight`,
    qA: `${a}.q_a_proj.weight`,
    qANorm: `${a}.q_a_layernorm.weight`,
    qB: `${a}.q_b_proj.weight`,
    kvA: `${a}.kv_a_proj_with_mqa.weight`,
    kvANorm: `${a}.kv_a_layernorm.weight`,
    kvB: `${a}.kv_b_proj.weight`,
    oProj: `${a}.o_proj.weight`,
    dense: mlp(`${p}.mlp`),
    router: `${p}.mlp.gate.weight`,
    correction: `${p}.mlp.gate.e_score_correction_bias`,
    shared: mlp(`${p}.mlp.shared_experts`),
    expert: (e: number) => mlp(`${p}.mlp.experts.${e}`),
  };
}

export function deepseekV3Tensors(spec: ModelSpec): TensorShapes {
  const { hiddenSize: H, numHeads: nH, headDim: rope, numExperts: E } = spec;
  const m = spec.mla!;
  const moe = new Set(spec.moeLayers);
  return tensorMap(spec, (out, l) => {
    const n = deepseekV3Names(l);
    out.set(n.inputNorm, [H]);
    out.set(n.qA, [m.qLoraRank, H]);
    out.set(n.qANorm, [m.qLoraRank]);
    out.set(n.qB, [nH * (m.qkNopeDim + rope), m.qLoraRank]);
    out.set(n.kvA, [m.kvLoraRank + rope, H]);
    out.set(n.kvANorm, [m.kvLoraRank]);
    out.set(n.kvB, [nH * (m.qkNopeDim + m.vHeadDim), m.kvLoraRank]);
    out.set(n.oProj, [H, nH * m.vHeadDim]);
    out.set(n.postAttnNorm, [H]);
    if (!moe.has(l)) {
      swigluShapes(out, n.dense, spec.denseIntermediate!, H);
      return;
    }
    out.set(n.router, [E, H]);
    out.set(n.correction, [E]);
    if (spec.sharedIntermediate) swigluShapes(out, n.shared, spec.sharedIntermediate, H);
    expertShapes(out, n.expert, spec);
  });
}

export function deepseekV3Weights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void, opts: WeightOptions = {}): ModelWeights {
  const stream = opts.streamExperts;
  // Linear projections (MLA's, o_proj, the dense and shared MLPs, routed experts) as stored when block FP8;
  // norms, the router, embeddings and lm_head float32.
  const { f32, matrix } = tensorReader(raw, onTensor, spec.quantization);
  const moe = new Set(spec.moeLayers);
  return modelWeights(spec, f32, (l) => {
    const n = deepseekV3Names(l);
    const isMoe = moe.has(l);
    return {
      inputNorm: f32(n.inputNorm),
      qProj: EMPTY,
      kProj: EMPTY,
      vProj: EMPTY,
      oProj: matrix(n.oProj),
      qNorm: EMPTY,
      kNorm: EMPTY,
      postAttnNorm: f32(n.postAttnNorm),
      mla: { qA: matrix(n.qA), qANorm: f32(n.qANorm), qB: matrix(n.qB), kvA: matrix(n.kvA), kvANorm: f32(n.kvANorm), kvB: matrix(n.kvB) },
      router: isMoe ? f32(n.router) : EMPTY,
      experts: isMoe ? (stream ? storedExperts(stream, n.expert, spec) : expertWeights(matrix, n.expert, spec)) : [],
      ...(isMoe ? { correctionBias: f32(n.correction) } : { dense: swigluWeights(matrix, n.dense) }),
      ...(isMoe && spec.sharedIntermediate ? { shared: swigluWeights(matrix, n.shared) } : {}),
    };
  });
}
