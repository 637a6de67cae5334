// The families' real shapes, as their hub config.json files give them (the fields the parser reads), parsed by the
// product's own parser and checked by the CUDA backend's support check: hidden sizes, heads, experts, routers,
// RoPE (YaRN included), latent attention ranks. tiny-moe's is the repo's own model.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseConfig } from '../../../src/model/config.ts';
import type { ModelSpec } from '../../../src/model/spec.ts';
import { checkCudaSupport } from '../../../src/backend/cuda/support.ts';

const FP8 = { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] };

/** Qwen/Qwen3-30B-A3B (and its -FP8 twin, block FP8 [128, 128]). */
const QWEN3 = {
  model_type: 'qwen3_moe', vocab_size: 151936, hidden_size: 2048, num_hidden_layers: 48, num_attention_heads: 32, num_key_value_heads: 4, head_dim: 128,
  moe_intermediate_size: 768, intermediate_size: 6144, num_experts: 128, num_experts_per_tok: 8, norm_topk_prob: true, rms_norm_eps: 1e-6, rope_theta: 1e6,
  max_position_embeddings: 40960, tie_word_embeddings: false, use_sliding_window: false, sliding_window: null, mlp_only_layers: [], decoder_sparse_step: 1,
  rope_scaling: null, bos_token_id: 151643, eos_token_id: 151645, hidden_act: 'silu', attention_bias: false,
};

/** mistralai/Mixtral-8x7B-v0.1. */
const MIXTRAL = {
  model_type: 'mixtral', vocab_size: 32000, hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8,
  num_local_experts: 8, num_experts_per_tok: 2, rms_norm_eps: 1e-5, rope_theta: 1e6, max_position_embeddings: 32768, sliding_window: null,
  tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu',
};

/** allenai/OLMoE-1B-7B-0924. */
const OLMOE = {
  model_type: 'olmoe', vocab_size: 50304, hidden_size: 2048, intermediate_size: 1024, num_hidden_layers: 16, num_attention_heads: 16, num_key_value_heads: 16,
  num_experts: 64, num_experts_per_tok: 8, norm_topk_prob: false, rms_norm_eps: 1e-5, rope_theta: 10000, max_position_embeddings: 4096, clip_qkv: null,
  attention_bias: false, tie_word_embeddings: false, bos_token_id: null, eos_token_id: 50279, hidden_act: 'silu',
};

/** openai/gpt-oss-20b (MXFP4 experts, sinks, alternating 128-position sliding windows, YaRN x32). */
const GPT_OSS = {
  model_type: 'gpt_oss', vocab_size: 201088, hidden_size: 2880, intermediate_size: 2880, num_hidden_layers: 24, num_attention_heads: 64, num_key_value_heads: 8,
  head_dim: 64, num_local_experts: 32, num_experts_per_tok: 4, experts_per_token: 4, rms_norm_eps: 1e-5, rope_theta: 150000, max_position_embeddings: 131072,
  rope_scaling: { beta_fast: 32.0, beta_slow: 1.0, factor: 32.0, original_max_position_embeddings: 4096, rope_type: 'yarn', truncate: false },
  sliding_window: 128, swiglu_limit: 7.0, attention_bias: true, tie_word_embeddings: false, bos_token_id: 199998, eos_token_id: 200002, hidden_act: 'silu',
  quantization_config: { quant_method: 'mxfp4', modules_to_not_convert: ['model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens', 'lm_head'] },
};

/** deepseek-ai/DeepSeek-V3 (block FP8, YaRN x40 with mscale_all_dim 1). */
const DEEPSEEK_V3 = {
  model_type: 'deepseek_v3', vocab_size: 129280, hidden_size: 7168, intermediate_size: 18432, moe_intermediate_size: 2048, num_hidden_layers: 61,
  num_attention_heads: 128, num_key_value_heads: 128, q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128,
  n_routed_experts: 256, n_shared_experts: 1, num_experts_per_tok: 8, n_group: 8, topk_group: 4, routed_scaling_factor: 2.5, norm_topk_prob: true,
  first_k_dense_replace: 3, topk_method: 'noaux_tc', scoring_func: 'sigmoid', rms_norm_eps: 1e-6, rope_theta: 10000, max_position_embeddings: 163840,
  rope_scaling: { beta_fast: 32, beta_slow: 1, factor: 40, mscale: 1.0, mscale_all_dim: 1.0, original_max_position_embeddings: 4096, type: 'yarn' },
  num_nextn_predict_layers: 1, tie_word_embeddings: false, bos_token_id: 0, eos_token_id: 1, hidden_act: 'silu', attention_bias: false, quantization_config: FP8,
};

export interface Family {
  /** The name printed in a case's shape. */
  readonly name: string;
  readonly spec: ModelSpec;
}

function family(name: string, config: Record<string, unknown>): Family {
  const spec = parseConfig(config, name);
  checkCudaSupport(spec);
  return { name, spec };
}

// The repo's tiny-moe (the device runs the bundle from the repo root, as the other device tests do).
const tinyConfig = JSON.parse(readFileSync(join(process.cwd(), 'models', 'tiny-moe', 'config.json'), 'utf8')) as Record<string, unknown>;

export const FAMILIES = {
  qwen3: family('qwen3_moe', QWEN3),
  qwen3Fp8: family('qwen3_moe-fp8', { ...QWEN3, quantization_config: FP8 }),
  mixtral: family('mixtral', MIXTRAL),
  olmoe: family('olmoe', OLMOE),
  gptOss: family('gpt_oss', GPT_OSS),
  deepseek: family('deepseek_v3', DEEPSEEK_V3),
  tiny: family('tiny-moe', tinyConfig),
} as const;
