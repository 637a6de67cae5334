// Writes a random qwen3_moe checkpoint with Qwen3-30B-A3B's per-layer shapes (hidden 2048, 32 heads of 128,
// 4 kv heads, 128 experts of 768, top-8), bf16, for host-memory and speed measurements at real shapes on
// the CPU (the vocabulary is smaller unless asked: the lm head is not what these measure).
// Run: node --import tsx bench/cpu/real-geometry.ts --out DIR [--layers 2] [--vocab 32768]
import { parseArgs } from 'node:util';
import { syntheticConfig, writeSyntheticCheckpoint } from '../../src/model/synthetic.ts';

const { values } = parseArgs({ options: { out: { type: 'string' }, layers: { type: 'string', default: '2' }, vocab: { type: 'string', default: '32768' } } });
if (!values.out) throw new Error('--out DIR is required');
const config = syntheticConfig({
  vocab_size: Number(values.vocab), hidden_size: 2048, num_hidden_layers: Number(values.layers), num_attention_heads: 32, num_key_value_heads: 4,
  head_dim: 128, moe_intermediate_size: 768, num_experts: 128, num_experts_per_tok: 8, tie_word_embeddings: false, max_position_embeddings: 4096,
  rope_theta: 1e6,
});
const t0 = performance.now();
const tensors = await writeSyntheticCheckpoint(values.out, { config, shards: 4 * Number(values.layers) });
const bytes = tensors.reduce((a, t) => a + t.bytes.length, 0);
console.log(`${values.out}: ${tensors.length} tensors, ${(bytes / 2 ** 30).toFixed(2)} GiB bf16, in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
