// OLMoE (model_type olmoe): Qwen3-MoE's tensor names, but q_norm / k_norm over the whole q and k projections
// (not per head), and by default top-k of the softmax without renormalization (norm_topk_prob false).

import { z } from 'zod';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames } from '../architecture.ts';
import type { ModelSpec } from '../spec.ts';
import type { LayerWeights, ModelWeights, RawTensor } from '../weights.ts';
import { baseFields, baseSpec, checkTopK, parseFields, posInt, refuseQuantized, ropeOf, swigluShapes, swigluWeights, tensorReader, unsupported } from './common.ts';

const OlmoeConfig = z.looseObject({
  ...baseFields,
  intermediate_size: posInt,
  num_experts: posInt,
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

export function olmoeTensors(spec: ModelSpec): Map<string, readonly number[]> {
  const { vocabSize: V, hiddenSize: H, numHeads, numKvHeads, headDim: d, numExperts: E, expertIntermediate: I } = spec;
  const out = new Map<string, readonly number[]>();
  out.set(EMBED, [V, H]);
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    out.set(n.inputNorm, [H]);
    out.set(n.qProj, [numHeads * d, H]);
    out.set(n.kProj, [numKvHeads * d, H]);
    out.set(n.vProj, [numKvHeads * d, H]);
    out.set(n.oProj, [H, numHeads * d]);
    out.set(n.qNorm, [numHeads * d]);
    out.set(n.kNorm, [numKvHeads * d]);
    out.set(n.postAttnNorm, [H]);
    out.set(n.router, [E, H]);
    for (let e = 0; e < E; e++) swigluShapes(out, n.expert(e), I, H);
  }
  out.set(FINAL_NORM, [H]);
  if (!spec.tieWordEmbeddings) out.set(LM_HEAD, [V, H]);
  return out;
}

export function olmoeWeights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void): ModelWeights {
  const { f32 } = tensorReader(raw, onTensor);
  const embed = f32(EMBED);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    layers.push({
      inputNorm: f32(n.inputNorm),
      qProj: f32(n.qProj),
      kProj: f32(n.kProj),
      vProj: f32(n.vProj),
      oProj: f32(n.oProj),
      qNorm: f32(n.qNorm),
      kNorm: f32(n.kNorm),
      postAttnNorm: f32(n.postAttnNorm),
      router: f32(n.router),
      experts: Array.from({ length: spec.numExperts }, (_, e) => swigluWeights(f32, n.expert(e))),
    });
  }
  const finalNorm = f32(FINAL_NORM);
  return { embed, layers, finalNorm, lmHead: spec.tieWordEmbeddings ? embed : f32(LM_HEAD) };
}
