// The time to read a cold expert in place (mapped pinned host memory, over the bus) through the product's
// expert kernels, for each stored format: bf16 and block FP8 (qwen3_moe layout) and MXFP4 (gpt-oss layout),
// at one expert geometry (default gpt-oss-120b's: hidden 2880, intermediate 2880). One MoE layer of 16
// experts, top-4, built in memory with zero weights (valid scales), so every token picks experts 0-3: with
// 4 experts hot those picks read HBM, with none hot they read host memory. The per-kernel device
// times (profilePiece, in graphs) of the batch-1 decode step's expert products, and the bytes they read.
//   node dist/bench-cold-read.mjs [--hidden 2880] [--inter 2880] [--out DIR]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseConfig } from '../../src/model/config.ts';
import { expectedTensors } from '../../src/model/architecture.ts';
import { mapTensorSource } from '../../src/model/tensor-source.ts';
import type { RawTensor } from '../../src/model/weights.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import { syntheticConfig } from '../../src/model/synthetic.ts';
import { loadDriver } from '../../src/backend/cuda/driver/driver.ts';
import { CudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import { bySequence } from '../../src/backend/sequences.ts';
import { planPieces } from '../../src/backend/cuda/step/plan.ts';

const { values } = parseArgs({ options: { hidden: { type: 'string', default: '2880' }, inter: { type: 'string', default: '2880' }, out: { type: 'string' } } });
const H = Number(values.hidden), I = Number(values.inter);
const E = 16, K = 4;
const shape = { hidden_size: H, num_hidden_layers: 1, num_attention_heads: 64, num_key_value_heads: 8, head_dim: 64, num_experts_per_tok: K, vocab_size: 8192, max_position_embeddings: 4096, tie_word_embeddings: false };

function qwenConfig(fp8: boolean): Record<string, unknown> {
  return syntheticConfig({
    ...shape, moe_intermediate_size: I, num_experts: E, bos_token_id: 0, eos_token_id: 0,
    ...(fp8 ? { quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] } } : {}),
  });
}

function gptOssConfig(): Record<string, unknown> {
  return {
    architectures: ['GptOssForCausalLM'], model_type: 'gpt_oss', ...shape, intermediate_size: I, num_local_experts: E, rms_norm_eps: 1e-5,
    layer_types: ['full_attention'], sliding_window: 128, attention_bias: true, bos_token_id: 0, eos_token_id: 0,
    rope_parameters: { rope_type: 'yarn', rope_theta: 150000, factor: 32, beta_fast: 32, beta_slow: 1, original_max_position_embeddings: 4096, truncate: false },
    quantization_config: { quant_method: 'mxfp4', modules_to_not_convert: ['model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens', 'lm_head'] },
  };
}

const count = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
/** Every tensor of the spec, zero: bf16, or (fp8) e4m3 linear weights with unit block scales, or (mxfp4) E2M1 blocks with unit scales (127). */
function zeroTensors(spec: ModelSpec): Map<string, RawTensor> {
  const raw = new Map<string, RawTensor>();
  const fp8 = spec.quantization?.method === 'fp8';
  for (const [name, sh] of expectedTensors(spec)) {
    if (/_blocks$/.test(name)) raw.set(name, { name, dtype: 'U8', shape: sh, bytes: new Uint8Array(count(sh)) });
    else if (/_scales$/.test(name)) raw.set(name, { name, dtype: 'U8', shape: sh, bytes: new Uint8Array(count(sh)).fill(127) });
    else if (fp8 && sh.length === 2 && name.endsWith('.weight') && !/norm|embed_tokens|lm_head|mlp\.gate\./.test(name)) {
      raw.set(name, { name, dtype: 'F8_E4M3', shape: sh, bytes: new Uint8Array(count(sh)) });
      const s = [Math.ceil(sh[0]! / 128), Math.ceil(sh[1]! / 128)];
      const scale = `${name}_scale_inv`;
      raw.set(scale, { name: scale, dtype: 'F32', shape: s, bytes: new Uint8Array(new Float32Array(count(s)).fill(1).buffer) });
    } else raw.set(name, { name, dtype: 'BF16', shape: sh, bytes: new Uint8Array(2 * count(sh)) });
  }
  return raw;
}

const d = await loadDriver();
const rows: { format: string; expertMiB: number; hotUs: number; coldUs: number; perColdUs: number; gbs: number }[] = [];
for (const [format, cfg] of [['bf16', qwenConfig(false)], ['block FP8', qwenConfig(true)], ['MXFP4', gptOssConfig()]] as const) {
  const spec = parseConfig(cfg, `cold-read-${format}`);
  const source = mapTensorSource(zeroTensors(spec), spec.quantization);
  const expertUs = (hot: number): { us: number; bytes: number } => {
    const be = bySequence(new CudaBackend(d, spec, source, { placement: { hotPerLayer: hot }, maxModelLen: 128, maxNumSeqs: 1, maxPieceRows: 64, spareRows: 1 }));
    try {
      be.openSequence(0, 64);
      be.forward({ chunks: [{ seq: 0, tokens: [1, 2, 3, 4, 5, 6, 7, 8], startPos: 0 }], count: false });
      const { launches } = be.profilePiece(planPieces([{ seq: 0, tokens: [9], startPos: 8 }], 64, 16)[0]!);
      return { us: launches.filter((x) => x.role.startsWith('experts_')).reduce((a, x) => a + x.us, 0), bytes: be.rowLayout.bytes };
    } finally {
      be.dispose();
    }
  };
  const hot = expertUs(K);
  const cold = expertUs(0);
  const perColdUs = cold.us / K;
  rows.push({ format, expertMiB: hot.bytes / 2 ** 20, hotUs: hot.us, coldUs: cold.us, perColdUs, gbs: hot.bytes / (perColdUs / 1e6) / 1e9 });
}
const table = [
  `# one cold expert read in place, expert geometry hidden ${H} x intermediate ${I} (gate, up, down), batch-1 decode step, top-${K} all hot vs all cold`,
  '| format | expert (MiB, as stored) | expert kernels, 4 picks hot (us) | 4 picks cold (us) | one cold expert (us) | GB/s over the bus |',
  '|---|---|---|---|---|---|',
  ...rows.map((r) => `| ${r.format} | ${r.expertMiB.toFixed(2)} | ${r.hotUs.toFixed(1)} | ${r.coldUs.toFixed(1)} | ${r.perColdUs.toFixed(1)} | ${r.gbs.toFixed(1)} |`),
].join('\n');
console.log(table);
if (values.out) writeFileSync(join(values.out, 'cold-read.json'), JSON.stringify({ H, I, rows }, null, 1));
