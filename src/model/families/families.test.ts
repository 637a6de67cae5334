// Config parsing of the families beyond qwen3_moe: the fixtures' configs parse into the specs the CPU
// backend computes, and what the engine does not implement is refused naming the key.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseConfig } from '../config.ts';
import { moeLayerIds } from '../spec.ts';
import { rejectsWith } from '../test-helpers.ts';
import { familyConfig, type Family } from '../../../fixtures/fixture-paths.ts';

const config = (family: Family): Record<string, unknown> => JSON.parse(readFileSync(familyConfig(family), 'utf8')) as Record<string, unknown>;

describe('mixtral config', () => {
  it('parses: softmax top-2 renormalized, GQA, no q/k norm', () => {
    const s = parseConfig(config('mixtral-tiny'), 'm');
    assert.equal(s.architecture, 'mixtral');
    assert.equal(s.numExperts, 8);
    assert.equal(s.topK, 2);
    assert.equal(s.normTopkProb, true);
    assert.equal(s.qkNorm, 'none');
    assert.equal(s.numKvHeads, 2);
    assert.equal(s.ropeTheta, 1e6);
    assert.deepEqual(moeLayerIds(s), [0, 1, 2, 3]);
  });
  for (const [key, over] of [
    ['sliding_window', { sliding_window: 4096 }],
    ['rope_parameters.rope_type', { rope_parameters: { rope_type: 'yarn', rope_theta: 1e6 } }],
    ['hidden_act', { hidden_act: 'gelu' }],
    ['quantization_config', { quantization_config: { quant_method: 'gptq' } }],
  ] as const) {
    it(`refuses ${key}`, async () => {
      await rejectsWith(() => parseConfig({ ...config('mixtral-tiny'), ...over }, 'm'), 'UNSUPPORTED_MODEL', new RegExp(`\\(mixtral\\): ${key.replace('.', '\\.')}:`));
    });
  }
});

describe('olmoe config', () => {
  it('parses: top-8 of 32 without renormalization, q/k norm over the whole projection', () => {
    const s = parseConfig(config('olmoe-tiny'), 'o');
    assert.equal(s.architecture, 'olmoe');
    assert.equal(s.numExperts, 32);
    assert.equal(s.topK, 8);
    assert.equal(s.normTopkProb, false);
    assert.equal(s.qkNorm, 'whole');
  });
  for (const [key, over] of [
    ['clip_qkv', { clip_qkv: 8 }],
    ['attention_bias', { attention_bias: true }],
  ] as const) {
    it(`refuses ${key}`, async () => {
      await rejectsWith(() => parseConfig({ ...config('olmoe-tiny'), ...over }, 'o'), 'UNSUPPORTED_MODEL', new RegExp(`\\(olmoe\\): ${key}:`));
    });
  }
});

describe('deepseek_v3 config', () => {
  it('parses: MLA, layer 0 dense, group-limited sigmoid router x 2.5, one shared expert', () => {
    const s = parseConfig(config('deepseek-v3-tiny'), 'd');
    assert.equal(s.architecture, 'deepseek_v3');
    assert.deepEqual(moeLayerIds(s), [1, 2, 3]);
    assert.equal(s.headDim, 16);
    assert.deepEqual(s.mla, { qLoraRank: 64, kvLoraRank: 32, qkNopeDim: 32, vHeadDim: 32, softmaxScale: 48 ** -0.5 });
    assert.deepEqual(s.router, { kind: 'sigmoid_group', nGroup: 4, topkGroup: 2, scalingFactor: 2.5 });
    assert.equal(s.normTopkProb, true);
    assert.equal(s.denseIntermediate, 256);
    assert.equal(s.sharedIntermediate, 64);
    assert.deepEqual(s.rope, { interleaved: true });
  });
  for (const [key, over] of [
    ['q_lora_rank', { q_lora_rank: null }],
    ['topk_method', { topk_method: 'greedy' }],
    ['scoring_func', { scoring_func: 'softmax' }],
    ['rope_parameters.rope_type', { rope_parameters: { rope_type: 'longrope', rope_theta: 10000, factor: 40, original_max_position_embeddings: 4096 } }],
  ] as const) {
    it(`refuses ${key}`, async () => {
      await rejectsWith(() => parseConfig({ ...config('deepseek-v3-tiny'), ...over }, 'd'), 'UNSUPPORTED_MODEL', new RegExp(`\\(deepseek_v3\\): ${key.replace('.', '\\.')}:`));
    });
  }
  // deepseek-ai/DeepSeek-V3's config.json as the hub has it (R1's differs in nothing read here): block FP8, one MTP
  // layer (not read, as transformers does not), YaRN in the older rope_scaling spelling. transformers 5.17: cos and
  // sin times get_mscale(40, 1) / get_mscale(40, 1) = 1, the softmax scale 192^-0.5 times get_mscale(40, 1)^2,
  // get_mscale(f, m) = 0.1 m ln f + 1 (= 1.36889).
  it('parses DeepSeek-V3\'s hub config: YaRN factor 40 with mscale = mscale_all_dim = 1 (cos and sin unscaled, the softmax 1.8739x sharper), block FP8, its MTP layer left unread', () => {
    const s = parseConfig({
      architectures: ['DeepseekV3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, aux_loss_alpha: 0.001, bos_token_id: 0, eos_token_id: 1, ep_size: 1,
      first_k_dense_replace: 3, hidden_act: 'silu', hidden_size: 7168, initializer_range: 0.02, intermediate_size: 18432, kv_lora_rank: 512,
      max_position_embeddings: 163840, model_type: 'deepseek_v3', moe_intermediate_size: 2048, moe_layer_freq: 1, n_group: 8, n_routed_experts: 256,
      n_shared_experts: 1, norm_topk_prob: true, num_attention_heads: 128, num_experts_per_tok: 8, num_hidden_layers: 61, num_key_value_heads: 128,
      num_nextn_predict_layers: 1, q_lora_rank: 1536, qk_nope_head_dim: 128, qk_rope_head_dim: 64,
      quantization_config: { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] },
      rms_norm_eps: 1e-6, rope_scaling: { beta_fast: 32, beta_slow: 1, factor: 40, mscale: 1.0, mscale_all_dim: 1.0, original_max_position_embeddings: 4096, type: 'yarn' },
      rope_theta: 10000, routed_scaling_factor: 2.5, scoring_func: 'sigmoid', seq_aux: true, tie_word_embeddings: false, topk_group: 4, topk_method: 'noaux_tc',
      torch_dtype: 'bfloat16', transformers_version: '4.33.1', use_cache: true, v_head_dim: 128, vocab_size: 129280,
    }, 'd');
    assert.equal(s.numLayers, 61);
    assert.equal(moeLayerIds(s).length, 58);
    assert.deepEqual(s.rope, { interleaved: true, yarn: { factor: 40, originalMaxPositions: 4096, betaFast: 32, betaSlow: 1, truncate: true, attentionFactor: 1 } });
    assert.ok(Math.abs(s.mla!.softmaxScale * Math.sqrt(192) - 1.873854) < 1e-6, `softmax scale x sqrt(192) ${s.mla!.softmaxScale * Math.sqrt(192)}`);
    assert.equal(s.quantization?.method, 'fp8');
  });
  it('YaRN without mscale_all_dim leaves the softmax scale alone; mscale alone gives cos and sin get_mscale(factor) (as transformers)', () => {
    const yarn = (extra: object) => parseConfig({ ...config('deepseek-v3-tiny'), rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 1024, ...extra } }, 'd');
    const plain = yarn({});
    assert.equal(plain.mla!.softmaxScale, 48 ** -0.5);
    assert.equal(plain.rope!.yarn!.attentionFactor, 0.1 * Math.log(4) + 1);
    assert.equal(yarn({ mscale: 0.707 }).rope!.yarn!.attentionFactor, 0.1 * Math.log(4) + 1);
    const both = yarn({ mscale: 0.707, mscale_all_dim: 0.5 });
    assert.equal(both.rope!.yarn!.attentionFactor, (0.1 * 0.707 * Math.log(4) + 1) / (0.1 * 0.5 * Math.log(4) + 1));
    const m = 0.1 * 0.5 * Math.log(4) + 1;
    assert.equal(both.mla!.softmaxScale, (48 ** -0.5) * m * m);
  });
  it('mscale_all_dim alone: cos and sin get_mscale(factor), the softmax get_mscale(factor, mscale_all_dim)^2 too; under the default RoPE it is not read', () => {
    const c = (rope: object) => parseConfig({ ...config('deepseek-v3-tiny'), rope_parameters: { rope_theta: 10000, ...rope } }, 'd');
    const alone = c({ rope_type: 'yarn', factor: 4, original_max_position_embeddings: 1024, mscale_all_dim: 0.5 });
    assert.equal(alone.rope!.yarn!.attentionFactor, 0.1 * Math.log(4) + 1);
    const m = 0.1 * 0.5 * Math.log(4) + 1;
    assert.equal(alone.mla!.softmaxScale, (48 ** -0.5) * m * m);
    const plain = c({ rope_type: 'default', factor: 4, mscale_all_dim: 0.5 });
    assert.deepEqual([plain.rope, plain.mla!.softmaxScale], [{ interleaved: true }, 48 ** -0.5]);
  });
  it('refuses DeepSeek\'s YaRN with mscale_all_dim but no factor (transformers does too)', async () => {
    await rejectsWith(() => parseConfig({ ...config('deepseek-v3-tiny'), rope_parameters: { rope_type: 'yarn', rope_theta: 10000, original_max_position_embeddings: 1024, mscale_all_dim: 1 } }, 'd'), 'BAD_CONFIG', /field rope_parameters\.factor: expected a positive number with mscale_all_dim \(got nothing\)/);
  });
  it('refuses a YaRN mscale_all_dim that is not a number', async () => {
    await rejectsWith(() => parseConfig({ ...config('deepseek-v3-tiny'), rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 1024, mscale_all_dim: 'big' } }, 'd'), 'BAD_CONFIG', /field rope_parameters\.mscale_all_dim: expected a number \(got "big"\)/);
  });
  it('refuses groups that cannot hold the top-k', async () => {
    await rejectsWith(() => parseConfig({ ...config('deepseek-v3-tiny'), n_group: 5 }, 'd'), 'BAD_CONFIG', /n_group: 5 must divide/);
    await rejectsWith(() => parseConfig({ ...config('deepseek-v3-tiny'), topk_group: 1, num_experts_per_tok: 9 }, 'd'), 'BAD_CONFIG', /num_experts_per_tok: 9 exceeds the 8 experts/);
  });
});

describe('gpt_oss config', () => {
  it('parses: sinks, alternating sliding (16) and full layers, YaRN, biased router, clamped SwiGLU', () => {
    const s = parseConfig(config('gpt-oss-tiny-mxfp4'), 'g');
    assert.equal(s.architecture, 'gpt_oss');
    assert.deepEqual(s.slidingWindows, [16, 0, 16, 0]);
    assert.equal(s.attentionSinks, true);
    assert.equal(s.attentionBias, true);
    assert.deepEqual(s.router, { kind: 'topk_softmax', bias: true });
    assert.deepEqual(s.expertAct, { kind: 'clamped_swiglu', limit: 7, alpha: 1.702 });
    assert.equal(s.rope?.yarn?.factor, 32);
    assert.equal(s.rope?.yarn?.truncate, false);
    assert.ok(Math.abs(s.rope!.yarn!.attentionFactor - (0.1 * Math.log(32) + 1)) < 1e-12);
  });
  for (const key of ['factor', 'attention_factor', 'original_max_position_embeddings', 'beta_fast']) {
    it(`refuses a YaRN ${key} that is not positive (NaN or zero rotations otherwise)`, async () => {
      const c = config('gpt-oss-tiny-mxfp4') as { rope_parameters: Record<string, unknown> };
      await rejectsWith(() => parseConfig({ ...c, rope_parameters: { ...c.rope_parameters, [key]: 0 } }, 'g'), 'BAD_CONFIG', new RegExp(`field rope_parameters\\.${key}: expected a positive number \\(got 0\\)`));
    });
  }
  for (const [key, over] of [
    ['quantization_config', { quantization_config: null }],
    ['layer_types.1', { layer_types: ['sliding_attention', 'chunked_attention', 'sliding_attention', 'full_attention'] }],
    ['rope_parameters.rope_type', { rope_parameters: { rope_type: 'longrope', rope_theta: 150000 } }],
  ] as const) {
    it(`refuses ${key}`, async () => {
      await rejectsWith(() => parseConfig({ ...config('gpt-oss-tiny-mxfp4'), ...over }, 'g'), 'UNSUPPORTED_MODEL', new RegExp(`\\(gpt_oss\\): ${key.replace(/\./g, '\\.')}:`));
    });
  }
});

describe('model_type', () => {
  it('an unknown one is refused, listing the supported ones', async () => {
    await rejectsWith(() => parseConfig({ model_type: 'llama' }, 'x'), 'UNSUPPORTED_MODEL', /"llama" is not supported; only "qwen3_moe", "mixtral"/);
  });
  it('a wrong field type names the field', async () => {
    await rejectsWith(() => parseConfig({ ...config('mixtral-tiny'), num_local_experts: 'eight' }, 'm'), 'BAD_CONFIG', /field num_local_experts/);
  });
});
