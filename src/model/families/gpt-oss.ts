// gpt-oss (model_type gpt_oss) with MXFP4 experts (the hub format, kept as stored: quant.ts): biases on
// q/k/v/o and the router, a sink logit per head, sliding-window (layer_types) and full layers, YaRN RoPE,
// softmax over the top-k router logits, and clamped SwiGLU experts whose gate and up rows interleave.

import { z } from 'zod';
import { ResidencyError } from '../../errors.ts';
import { layerTensorNames, type MoeNames } from '../tensor-names.ts';
import type { ModelSpec } from '../spec.ts';
import type { ExpertWeights, ModelWeights, RawTensor } from '../weights.ts';
import {
  attentionShapes, attentionWeights, badConfig, baseFields, baseSpec, checkTopK, EMPTY, modelWeights, parseFields, posInt, ropeOf, tensorMap,
  tensorReader, unsupported, yarnOf, type TensorShapes,
  CONFIG_BOUNDS, checkTotalExperts, sized,
} from './common.ts';
import { parseQuantization, notConverted } from '../quant-config.ts';
import { mxfp4Matrix } from '../quant-read.ts';
import { quantRows } from '../quant.ts';

const T = 'gpt_oss';
/** transformers GptOssExperts' alpha (not a config key). */
const ALPHA = 1.702;

const GptOssConfig = z.looseObject({
  ...baseFields,
  intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  num_local_experts: sized(CONFIG_BOUNDS.experts),
  layer_types: z.array(z.string()).optional(),
  sliding_window: posInt.nullish(),
  swiglu_limit: z.number().positive().optional(),
});

export function parseGptOss(json: unknown, name: string): ModelSpec {
  const c = parseFields(GptOssConfig, json);
  if (c.quantization_config == null) {
    throw unsupported(T, 'quantization_config', 'absent: only MXFP4 experts (quant_method "mxfp4", the hub format) are supported');
  }
  const quantization = parseQuantization(T, c.quantization_config, ['mxfp4'])!;
  // Experts left in bf16 are stored as gate_up_proj / down_proj [E, in, out], a layout not read here.
  if (notConverted(quantization, 'model.layers.0.mlp.experts')) {
    throw unsupported(T, 'quantization_config.modules_to_not_convert', 'lists the experts: only MXFP4 experts (*_blocks / *_scales) are supported');
  }
  const L = c.num_hidden_layers;
  const types = c.layer_types ?? Array.from({ length: L }, (_, l) => ((l + 1) % 2 ? 'sliding_attention' : 'full_attention'));
  if (types.length !== L) throw badConfig(`field layer_types: ${types.length} entries for ${L} layers`);
  const bad = types.findIndex((t) => t !== 'sliding_attention' && t !== 'full_attention');
  if (bad >= 0) throw unsupported(T, `layer_types.${bad}`, `"${types[bad]}" is not supported; only "sliding_attention" and "full_attention"`);
  if (types.includes('sliding_attention') && c.sliding_window == null) throw badConfig('field sliding_window: sliding_attention layers need it');
  const base = baseSpec(T, c, name);
  const rope = ropeOf(T, c);
  if (rope.ropeType !== 'yarn' && rope.ropeType !== 'default') throw unsupported(T, 'rope_parameters.rope_type', `"${rope.ropeType}" is not supported; only "yarn" and "default"`);
  if (base.hiddenSize % 32 !== 0 || c.intermediate_size % 32 !== 0) {
    throw badConfig(`fields hidden_size ${base.hiddenSize} and intermediate_size ${c.intermediate_size} must be multiples of 32 (the MXFP4 group)`);
  }
  checkTopK(c.num_experts_per_tok, c.num_local_experts);
  checkTotalExperts(c.num_hidden_layers, c.num_local_experts);
  return Object.freeze({
    architecture: T,
    ...base,
    rmsNormEps: c.rms_norm_eps ?? 1e-5,
    numExperts: c.num_local_experts,
    expertIntermediate: c.intermediate_size,
    normTopkProb: false,
    qkNorm: 'none',
    router: { kind: 'topk_softmax', bias: true },
    rope: { interleaved: false, ...(rope.ropeType === 'yarn' ? { yarn: yarnOf(T, rope.params, base.maxPositions) } : {}) },
    attentionBias: c.attention_bias ?? true,
    attentionSinks: true,
    slidingWindows: Object.freeze(types.map((t) => (t === 'sliding_attention' ? c.sliding_window! : 0))),
    expertAct: { kind: 'clamped_swiglu', limit: c.swiglu_limit ?? 7, alpha: ALPHA },
    quantization,
  } satisfies ModelSpec);
}

/** A gpt-oss layer's tensors beyond the common ones (biases, sinks, router, the stacked MXFP4 experts). */
export function gptOssNames(l: number) {
  const a = `model.layers.${l}.self_attn`;
  const x = `model.layers.${l}.mlp.experts`;
  return {
    qBias: `${a}.q_proj.bias`,
    kBias: `${a}.k_proj.bias`,
    vBias: `${a}.v_proj.bias`,
    oBias: `${a}.o_proj.bias`,
    sinks: `${a}.sinks`,
    router: `model.layers.${l}.mlp.router.weight`,
    routerBias: `model.layers.${l}.mlp.router.bias`,
    gateUpBlocks: `${x}.gate_up_proj_blocks`,
    gateUpScales: `${x}.gate_up_proj_scales`,
    gateUpBias: `${x}.gate_up_proj_bias`,
    downBlocks: `${x}.down_proj_blocks`,
    downScales: `${x}.down_proj_scales`,
    downBias: `${x}.down_proj_bias`,
  };
}

/** The router, and no per-expert names: gpt-oss stacks a layer's experts in its gate_up / down tensors. */
export function gptOssMoeNames(l: number): MoeNames {
  return {
    router: gptOssNames(l).router,
    expert: () => {
      throw new ResidencyError('INTERNAL', `gpt-oss layer ${l}: experts are stacked in ${gptOssNames(l).gateUpBlocks} and its likes, not one tensor each`);
    },
  };
}

export function gptOssTensors(spec: ModelSpec): TensorShapes {
  const { hiddenSize: H, numHeads: nH, numKvHeads: nKv, headDim: d, numExperts: E, expertIntermediate: I } = spec;
  return tensorMap(spec, (out, l) => {
    const s = layerTensorNames(l);
    const n = gptOssNames(l);
    out.set(s.inputNorm, [H]);
    attentionShapes(out, s, spec);
    if (spec.attentionBias) {
      out.set(n.qBias, [nH * d]);
      out.set(n.kBias, [nKv * d]);
      out.set(n.vBias, [nKv * d]);
      out.set(n.oBias, [H]);
    }
    out.set(n.sinks, [nH]);
    out.set(s.postAttnNorm, [H]);
    out.set(n.router, [E, H]);
    out.set(n.routerBias, [E]);
    out.set(n.gateUpBlocks, [E, 2 * I, H / 32, 16]);
    out.set(n.gateUpScales, [E, 2 * I, H / 32]);
    out.set(n.gateUpBias, [E, 2 * I]);
    out.set(n.downBlocks, [E, H, I / 32, 16]);
    out.set(n.downScales, [E, H, I / 32]);
    out.set(n.downBias, [E, H]);
  });
}

export function gptOssWeights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void): ModelWeights {
  const { f32, raw: rawOf } = tensorReader(raw, onTensor);
  const { hiddenSize: H, expertIntermediate: I } = spec;
  // Rows of gate_up interleave: 2j is gate unit j, 2j + 1 up unit j (transformers: [..., ::2], [..., 1::2]).
  const gateRows = Array.from({ length: I }, (_, j) => 2 * j);
  const upRows = gateRows.map((r) => r + 1);
  return modelWeights(spec, f32, (l) => {
    const s = layerTensorNames(l);
    const n = gptOssNames(l);
    const gateUp = { blocks: rawOf(n.gateUpBlocks), scales: rawOf(n.gateUpScales), bias: f32(n.gateUpBias) };
    const down = { blocks: rawOf(n.downBlocks), scales: rawOf(n.downScales), bias: f32(n.downBias) };
    const experts: ExpertWeights[] = [];
    for (let e = 0; e < spec.numExperts; e++) {
      // Kept as stored (MXFP4 bytes and scales), gate and up split into their own rows.
      const gu = mxfp4Matrix(gateUp.blocks, gateUp.scales, e, 2 * I, H);
      const gateBias = new Float32Array(I);
      const upBias = new Float32Array(I);
      for (let j = 0; j < I; j++) {
        gateBias[j] = gateUp.bias[e * 2 * I + 2 * j]!;
        upBias[j] = gateUp.bias[e * 2 * I + 2 * j + 1]!;
      }
      experts.push({
        gate: quantRows(gu, gateRows),
        up: quantRows(gu, upRows),
        down: mxfp4Matrix(down.blocks, down.scales, e, H, I),
        gateBias,
        upBias,
        downBias: down.bias.slice(e * H, e * H + H),
      });
    }
    return {
      inputNorm: f32(s.inputNorm),
      ...attentionWeights(f32, s),
      qNorm: EMPTY,
      kNorm: EMPTY,
      postAttnNorm: f32(s.postAttnNorm),
      router: f32(n.router),
      routerBias: f32(n.routerBias),
      sinks: f32(n.sinks),
      experts,
      ...(spec.attentionBias ? { qBias: f32(n.qBias), kBias: f32(n.kBias), vBias: f32(n.vBias), oBias: f32(n.oBias) } : {}),
    };
  });
}
