import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseConfig } from './config.ts';
import { SHIPPED_MODEL, rejectsWith } from './test-helpers.ts';

const shipped = JSON.parse(await readFile(join(SHIPPED_MODEL, 'config.json'), 'utf8')) as Record<string, unknown>;
const parse = (over: Record<string, unknown>, drop: string[] = []) => {
  const c: Record<string, unknown> = { ...shipped, ...over };
  for (const k of drop) delete c[k];
  return parseConfig(c, 'm');
};

describe('config.json: accepted spellings', () => {
  it('hub spelling (num_experts, rope_theta) as shipped', () => {
    const s = parse({});
    assert.equal(s.numExperts, 64);
    assert.equal(s.ropeTheta, 10000);
    assert.equal(s.name, 'm');
  });
  it('new transformers spelling (num_local_experts, rope_parameters.rope_theta)', () => {
    const s = parse({ num_local_experts: 64, rope_parameters: { rope_type: 'default', rope_theta: 500000 } }, ['num_experts', 'rope_theta']);
    assert.equal(s.numExperts, 64);
    assert.equal(s.ropeTheta, 500000);
  });
  it('both spellings agreeing is fine; disagreeing is refused naming both', async () => {
    assert.equal(parse({ num_local_experts: 64 }).numExperts, 64);
    await rejectsWith(() => parse({ num_local_experts: 32 }), 'BAD_CONFIG', /num_experts=64 and num_local_experts=32 disagree/);
    await rejectsWith(() => parse({ rope_parameters: { rope_theta: 5 } }), 'BAD_CONFIG', /rope_theta=10000 and rope_parameters\.rope_theta=5 disagree/);
  });
  it('head_dim defaults to hidden/heads', () => {
    assert.equal(parse({}, ['head_dim']).headDim, 64);
    assert.equal(parse({ head_dim: null }).headDim, 64);
    assert.equal(parse({ head_dim: 32 }).headDim, 32);
  });
  it('eos_token_id as a number, an array, or absent', () => {
    assert.deepEqual(parse({ eos_token_id: 3 }).eosTokenIds, [3]);
    assert.deepEqual(parse({ eos_token_id: [1, 2] }).eosTokenIds, [1, 2]);
    assert.deepEqual(parse({}, ['eos_token_id']).eosTokenIds, []);
  });
  it('sliding_window set but unused is fine; absent optional keys take HF defaults', () => {
    assert.equal(parse({ sliding_window: 4096, use_sliding_window: false }).numLayers, 6);
    const s = parse({}, ['rope_theta', 'norm_topk_prob', 'tie_word_embeddings', 'rms_norm_eps', 'max_position_embeddings', 'bos_token_id']);
    assert.equal(s.ropeTheta, 10000);
    assert.equal(s.normTopkProb, false);
    assert.equal(s.tieWordEmbeddings, false);
    assert.equal(s.rmsNormEps, 1e-6);
    assert.equal(s.maxPositions, 32768);
    assert.equal(s.bosTokenId, null);
  });
});

describe('config.json: unsupported options are refused, naming the key', () => {
  const cases: [string, Record<string, unknown>][] = [
    ['model_type', { model_type: 'qwen2_moe' }],
    ['use_sliding_window', { use_sliding_window: true, sliding_window: 4096 }],
    ['mlp_only_layers', { mlp_only_layers: [0] }],
    ['decoder_sparse_step', { decoder_sparse_step: 2 }],
    ['rope_scaling', { rope_scaling: { type: 'yarn', factor: 4 } }],
    ['rope_parameters.rope_type', { rope_parameters: { rope_type: 'yarn', rope_theta: 10000 } }],
    ['shared_expert_intermediate_size', { shared_expert_intermediate_size: 512 }],
    ['num_shared_experts', { num_shared_experts: 1 }],
    ['attention_bias', { attention_bias: true }],
    ['hidden_act', { hidden_act: 'gelu' }],
    ['quantization_config.quant_method', { quantization_config: { quant_method: 'bitsandbytes' } }],
  ];
  for (const [key, over] of cases) {
    it(key, async () => {
      const err = await rejectsWith(() => parse(over), 'UNSUPPORTED_MODEL');
      assert.ok(err.message.includes(`config.json: ${key}:`) || err.message.includes(`config.json (qwen3_moe): ${key}:`), err.message);
    });
  }
  it('a missing model_type', async () => {
    await rejectsWith(() => parse({}, ['model_type']), 'UNSUPPORTED_MODEL', /model_type: undefined is not supported/);
  });
});

describe('config.json: wrong types name the field', () => {
  const cases: [string, Record<string, unknown>, string[]][] = [
    ['hidden_size', { hidden_size: '128' }, []],
    ['num_hidden_layers', { num_hidden_layers: 0 }, []],
    ['vocab_size', { vocab_size: 81.5 }, []],
    ['num_experts_per_tok', {}, ['num_experts_per_tok']],
    ['moe_intermediate_size', {}, ['moe_intermediate_size']],
    ['eos_token_id', { eos_token_id: 'x' }, []],
    ['norm_topk_prob', { norm_topk_prob: 1 }, []],
    ['rope_parameters.rope_theta', { rope_parameters: { rope_theta: 'big' } }, []],
    ['num_experts', {}, ['num_experts']],
    ['num_experts_per_tok', { num_experts_per_tok: 65 }, []],
    ['num_key_value_heads', { num_key_value_heads: 3 }, []],
    ['head_dim', { hidden_size: 129 }, ['head_dim']],
    // RoPE rotates halves of each head: an odd head_dim has no halves (it used to fail later as a RangeError).
    ['head_dim', { head_dim: 63 }, []],
    ['head_dim', { hidden_size: 120, num_attention_heads: 8, num_key_value_heads: 4 }, ['head_dim']],
  ];
  for (const [field, over, drop] of cases) {
    it(`${field} ${JSON.stringify(over)}${drop.length ? ` without ${drop}` : ''}`, async () => {
      const err = await rejectsWith(() => parse(over, drop), 'BAD_CONFIG');
      assert.ok(err.message.includes(`field ${field}`), err.message);
    });
  }
  it('a non-object config', async () => {
    await rejectsWith(() => parseConfig([1], 'm'), 'BAD_CONFIG', /must be a JSON object/);
  });
});
