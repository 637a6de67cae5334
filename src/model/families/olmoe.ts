// OLMoE (model_type olmoe): Qwen3-MoE's tensor names, but q_norm / k_norm over the whole q and k projections
// (not per head), and by default top-k of the softmax without renormalization (norm_topk_prob false).

import { z } from 'zod';
import { layerTensorNames } from '../tensor-names.ts';
import type { ModelSpec } from '../spec.ts';
import type { ModelWeights, RawTensor } from '../weights.ts';
import {
  attentionShapes, attentionWeights, baseFields, baseSpec, checkTopK, expertShapes, expertWeights, modelWeights, parseFields, posInt,
  refuseQuantized, ropeOf, tensorMap, tensorReader, unsupported, type TensorShapes,
  storedExperts, type WeightOptions,
  CONFIG_BOUNDS, checkTotalExperts, sized,
} from './common.ts';

const OlmoeConfig = z.looseObject({
  ...baseFields,
  intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  num_experts: sized(CONFIG_BOUNDS.experts),
  norm_topk_prob: z.boolean().optional(),
  clip_qkv: z.number().nullish(),
});

export function parseOlmoe(json: unknown, name: string): ModelSpec {
  const c = parseFields(OlmoeConfig, json);
  if (c.clip_qkv != null) throw unsupported('olmoe', 'clip_qkv', `clipping q/k/v (${c.clip_qkv}) is not supported; only null`);
  if (c.attention_bias === true) throw unsupported('olmoe', 'attention_bias', 'attention projections with bias are not supported');
  const rope = ropeOf('olmoe', c);
  if (rope.ropeType !== 'default') throw unsupported('olmoe', 'rope_parameters.rope_type', `"${rope.ropeType}" is not supported; only "default"`);
  refuseQuantized('olmoe', c.quantization_config);
  checkTopK(c.num_experts_per_tok, c.num_experts);
  checkTotalExperts(c.num_hidden_layers, c.num_experts);
  return Object.freeze({
    architecture: 'olmoe',
    ...baseSpec('olmoe', c, name),
    rmsNormEps: c.rms_norm_eps ?? 1e-5,
    numExperts: c.num_experts,
    expertIntermediate: c.intermediate_size,
    normTopkProb: c.norm_topk_prob ?? false,
    qkNorm: 'whole',
    router: { kind: 'softmax_topk' },
  } satisfies ModelSpec);
}

export function olmoeTensors(spec: ModelSpec): TensorShapes {
  const { hiddenSize: H, numHeads, numKvHeads, headDim: d, numExperts: E } = spec;
  return tensorMap(spec, (out, l) => {
    const n = layerTensorNames(l);
    out.set(n.inputNorm, [H]);
    attentionShapes(out, n, spec);
    out.set(n.qNorm, [numHeads * d]);
    out.set(n.kNorm, [numKvHeads * d]);
    out.set(n.postAttnNorm, [H]);
    out.set(n.router, [E, H]);
    expertShapes(out, n.expert, spec);
  });
}

export function olmoeWeights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void, opts: WeightOptions = {}): ModelWeights {
  const stream = opts.streamExperts;
  const { f32 } = tensorReader(raw, onTensor);
  return modelWeights(spec, f32, (l) => {
    const n = layerTensorNames(l);
    return {
      inputNorm: f32(n.inputNorm),
      ...attentionWeights(f32, n),
      qNorm: f32(n.qNorm),
      kNorm: f32(n.kNorm),
      postAttnNorm: f32(n.postAttnNorm),
      router: f32(n.router),
      experts: stream ? storedExperts(stream, n.expert, spec) : expertWeights(f32, n.expert, spec),
    };
  });
}
