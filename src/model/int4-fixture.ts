// The small 4-bit fixtures: a qwen3_moe checkpoint per format (GPTQ symmetric, GPTQ with zero points, AWQ,
// compressed-tensors int4), generated from a seed by synthetic.ts (random weights quantized and packed in TS), so tests
// need nothing outside the repository. Every linear of a decoder block is 4-bit (as Qwen's GPTQ-Int4), the router,
// embedding and lm head bf16; groups of 32 as in published checkpoints.
import { syntheticConfig, writeSyntheticCheckpoint } from './synthetic.ts';

export const INT4_FORMATS = ['gptq', 'gptq-zp', 'awq', 'ct-int4'] as const;
export type Int4FixtureFormat = (typeof INT4_FORMATS)[number];

/** Each format's quantization_config as the hub's checkpoints spell it. */
export const INT4_QUANT_CONFIGS: Readonly<Record<Int4FixtureFormat, Record<string, unknown>>> = {
  'gptq': { quant_method: 'gptq', bits: 4, group_size: 32, desc_act: false, sym: true, damp_percent: 0.01, true_sequential: true, static_groups: false },
  'gptq-zp': { quant_method: 'gptq', bits: 4, group_size: 32, desc_act: false, sym: false, checkpoint_format: 'gptq' },
  'awq': { quant_method: 'awq', bits: 4, group_size: 32, zero_point: true, version: 'gemm', modules_to_not_convert: null },
  'ct-int4': {
    quant_method: 'compressed-tensors', format: 'pack-quantized', quantization_status: 'compressed', kv_cache_scheme: null,
    config_groups: { group_0: { targets: ['Linear'], input_activations: null, output_activations: null, weights: { num_bits: 4, type: 'int', symmetric: true, strategy: 'group', group_size: 32, dynamic: false, actorder: null, block_structure: null, observer: 'minmax' } } },
    ignore: ['lm_head', 're:.*mlp.gate$'],
  },
};

/** A fixture's config.json: 2 layers, hidden 64, 4 heads of 16 (2 kv), 8 experts of 32 (top 2), bf16 router and head. */
export function int4FixtureConfig(format: Int4FixtureFormat): Record<string, unknown> {
  return syntheticConfig({
    hidden_size: 64, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, moe_intermediate_size: 32,
    num_experts: 8, num_experts_per_tok: 2, tie_word_embeddings: false, quantization_config: INT4_QUANT_CONFIGS[format],
  });
}

/** Writes fixture `format` (seed 48, two shards) to `dir`. */
export async function writeInt4Fixture(dir: string, format: Int4FixtureFormat): Promise<void> {
  await writeSyntheticCheckpoint(dir, { config: int4FixtureConfig(format), seed: 48, shards: 2 });
}
