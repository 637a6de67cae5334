// Converts raw checkpoint tensors to float32 (exactly: bf16 and f16 are subsets of f32) and assembles
// the ModelWeights the CPU backend computes with.

import { ResidencyError } from '../errors.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames } from './architecture.ts';
import type { ModelSpec } from './spec.ts';
import { familyOf } from './families/index.ts';
import type { ExpertWeights, LayerWeights, ModelWeights, RawTensor } from './weights.ts';

export { f16BitsToF32Bits, tensorToFloat32 } from './float-convert.ts';
import { tensorToFloat32 } from './float-convert.ts';

/**
 * Builds ModelWeights from validated raw tensors (checkArchitecture must have passed). `onTensor` is
 * called after each conversion with the tensor's raw byte size, for progress.
 */
export function toFloat32Weights(
  spec: ModelSpec,
  raw: ReadonlyMap<string, RawTensor>,
  onTensor?: (name: string, bytes: number) => void,
): ModelWeights {
  const family = familyOf(spec.architecture);
  if (family) return family.weights(spec, raw, onTensor);
  const get = (name: string): Float32Array => {
    const t = raw.get(name);
    if (!t) throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}" is missing`);
    const f = tensorToFloat32(t, { finite: true });
    onTensor?.(name, t.bytes.length);
    return f;
  };
  const embed = get(EMBED);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    const experts: ExpertWeights[] = [];
    for (let e = 0; e < spec.numExperts; e++) {
      const x = n.expert(e);
      experts.push({ gate: get(x.gate), up: get(x.up), down: get(x.down) });
    }
    layers.push({
      inputNorm: get(n.inputNorm),
      qProj: get(n.qProj),
      kProj: get(n.kProj),
      vProj: get(n.vProj),
      oProj: get(n.oProj),
      qNorm: get(n.qNorm),
      kNorm: get(n.kNorm),
      postAttnNorm: get(n.postAttnNorm),
      router: get(n.router),
      experts,
    });
  }
  const finalNorm = get(FINAL_NORM);
  const lmHead = spec.tieWordEmbeddings ? embed : get(LM_HEAD);
  return { embed, layers, finalNorm, lmHead };
}
