// Mixtral (model_type mixtral): Qwen3-MoE's layer without q/k norms, experts named
// block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down), softmax over all experts then top-k renormalized.

import { z } from 'zod';
import { layerTensorNames, type MoeNames } from '../tensor-names.ts';
import type { ModelSpec } from '../spec.ts';
import type { ModelWeights, RawTensor } from '../weights.ts';
import {
  attentionShapes, attentionWeights, baseFields, baseSpec, checkTopK, EMPTY, expertShapes, expertWeights, modelWeights, parseFields, posInt,
  refuseQuantized, ropeOf, tensorMap, tensorReader, unsupported, type TensorShapes,
  storedExperts, type WeightOptions,
  CONFIG_BOUNDS, checkTotalExperts, sized,
} from './common.ts';

const MixtralConfig = z.looseObject({
  ...baseFields,
  intermediate_size: sized(CONFIG_BOUNDS.intermediate),
  num_local_experts: sized(CONFIG_BOUNDS.experts),
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
  checkTotalExperts(c.num_hidden_layers, c.num_local_experts);
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

/** Layer l's router and routed experts' tensor names (block_sparse_moe). */
export function mixtralMoeNames(l: number): MoeNames {
  const p = `model.layers.${l}.block_sparse_moe`;
  return {
    router: `${p}.gate.weight`,
    expert: (e: number) => ({ gate: `${p}.experts.${e}.w1.weight`, up: `${p}.experts.${e}.w3.weight`, down: `${p}.experts.${e}.w2.weight` }),
  };
}

export function mixtralTensors(spec: ModelSpec): TensorShapes {
  const { hiddenSize: H, numExperts: E } = spec;
  return tensorMap(spec, (out, l) => {
    const n = layerTensorNames(l);
    const m = mixtralMoeNames(l);
    out.set(n.inputNorm, [H]);
    attentionShapes(out, n, spec);
    out.set(n.postAttnNorm, [H]);
    out.set(m.router, [E, H]);
    expertShapes(out, m.expert, spec);
  });
}

export function mixtralWeights(spec: ModelSpec, raw: ReadonlyMap<string, RawTensor>, onTensor?: (name: string, bytes: number) => void, opts: WeightOptions = {}): ModelWeights {
  const stream = opts.streamExperts;
  const { f32 } = tensorReader(raw, onTensor);
  return modelWeights(spec, f32, (l) => {
    const n = layerTensorNames(l);
    const m = mixtralMoeNames(l);
    return {
      inputNorm: f32(n.inputNorm),
      ...attentionWeights(f32, n),
      qNorm: EMPTY,
      kNorm: EMPTY,
      postAttnNorm: f32(n.postAttnNorm),
      router: f32(m.router),
      experts: stream ? storedExperts(stream, m.expert, spec) : expertWeights(f32, m.expert, spec),
    };
  });
}
