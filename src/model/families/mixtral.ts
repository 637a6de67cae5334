// Mixtral (model_type mixtral): Qwen3-MoE's layer without q/k norms, experts named
// block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down), softmax over all experts then top-k renormalized.

import { z } from 'zod';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames } from '../architecture.ts';
import type { ModelSpec } from '../spec.ts';
import type { LayerWeights, ModelWeights, RawTensor } from '../weights.ts';
import { baseFields, baseSpec, checkTopK, parseFields, posInt, refuseQuantized, ropeOf, swigluShapes, swigluWeights, tensorReader, unsupported, EMPTY } from './common.ts';

const MixtralConfig = z.looseObject({
  ...baseFields,
  intermediate_size: posInt,
  num_local_experts: posInt,
  sliding_window: z.number().int().nullish(),
});

export function parseMixtral(json: unknown, name: string): ModelSpec {
  const c = parseFields(MixtralConfig, json);
  if (c.sliding_window != null) throw unsupported('mixtral', 'sliding_window', `sliding-window attention (${c.sliding_window}) is not supported; only full attention (null)`);
  const rope = ropeOf('mixtral', c);
  if (rope.ropeType !== 'default') throw unsupported('mixtral', 'rope_parameters.rope_type', `"${rope.ropeType}" is not supported; only "default"`);
  if (c.attention_bias === true) throw unsupported('mixtral', 'attention_bias', 'attention projections with bias are not supported');
  refuseQuantized('mixtral', c.quantization_config);
  checkTopK(c.num_experts_per_tok, c.num_local_experts);
  return Object.freeze({
    architecture: 'mixtral',
    ...baseSpec('mixtral', c, name),
    numExperts: c.num_local_experts,
    expertIntermediate: c.intermediate_size,
    // MixtralSparseMoeBlock always renormalizes the top-k.
    normTopkProb: true,
    qkNorm: 'none',
    router: { kind: 'softmax_topk' },
  } satisfies ModelSpec);
}

function names(l: number) {
  const p = `model.layers.${l}.block_sparse_moe`;
  return {
    router: `${p}.gate.weight`,
    expert: (e: number) => ({ gate: `${p}.experts.${e}.w1.weight`, up: `${p}.experts.${e}.w3.weight`, down: `${p}.experts.${e}.w2.weight` }),
  };
}

export function mixtralTensors(spec: ModelSpec): Map<string, readonly number[]> {
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
    out.set(n.postAttnNorm, [H]);
    const m = names(l);
    out.set(m.router, [E, H]);
    for (let e = 0; e < E; e++) swigluShapes(out, m.expert(e), I, H);
  }
  out.set(FINAL_NORM, [H]);
  if (!spec.tieWordEmbeddings) out.set(LM_HEAD, [V, H]);
  return out;
}

export function mixtralWeights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void): ModelWeights {
  const { f32 } = tensorReader(raw, onTensor);
  const embed = f32(EMBED);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    const m = names(l);
    layers.push({
      inputNorm: f32(n.inputNorm),
      qProj: f32(n.qProj),
      kProj: f32(n.kProj),
      vProj: f32(n.vProj),
      oProj: f32(n.oProj),
      qNorm: EMPTY,
      kNorm: EMPTY,
      postAttnNorm: f32(n.postAttnNorm),
      router: f32(m.router),
      experts: Array.from({ length: spec.numExperts }, (_, e) => swigluWeights(f32, m.expert(e))),
    });
  }
  const finalNorm = f32(FINAL_NORM);
  return { embed, layers, finalNorm, lmHead: spec.tieWordEmbeddings ? embed : f32(LM_HEAD) };
}
