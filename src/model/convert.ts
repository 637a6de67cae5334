// Assembles the ModelWeights the CPU backend computes with from raw checkpoint tensors: float tensors
// converted to float32 (exactly: bf16 and f16 are subsets of f32), block-FP8 projections kept as stored.

import { EMBED, layerTensorNames } from './tensor-names.ts';
import type { ModelSpec } from './spec.ts';
import { familyOf } from './families/index.ts';
import type { ModelWeights, RawTensor, VocabMatrix } from './weights.ts';
import type { TensorSource } from './tensor-source.ts';
import { attentionWeights, expertWeights, modelWeights, storedExperts, tensorReader, type Bf16Placer } from './families/common.ts';

export { f16BitsToF32Bits, tensorToFloat32 } from './float-convert.ts';

/**
 * Builds ModelWeights from validated raw tensors (checkArchitecture must have passed). `onTensor` is
 * called after each conversion with the tensor's raw byte size, for progress. `keepBf16` (qwen3_moe): bf16
 * attention projections, experts, embedding and lm head stay as stored instead of float32. `streamExperts`
 * (qwen3_moe float or block-FP8 experts, mixtral, olmoe, deepseek_v3): the routed experts are not read here but
 * left in that source for a backend to read (StoredExpert).
 * `freshBytes`: each get of `raw` reads bytes of their own (readOnGet), which bf16 kept as stored may keep.
 * `placeBf16`: bf16 matrices kept as stored are read by it (straight into the memory it chose) where it takes them.
 */
export function toFloat32Weights(
  spec: ModelSpec,
  raw: ReadonlyMap<string, RawTensor>,
  onTensor?: (name: string, bytes: number) => void,
  opts: { readonly keepBf16?: boolean; readonly streamExperts?: TensorSource; readonly freshBytes?: boolean; readonly placeBf16?: Bf16Placer } = {},
): ModelWeights {
  const family = familyOf(spec.architecture);
  if (family) return family.weights(spec, raw, onTensor, opts.streamExperts ? { streamExperts: opts.streamExperts } : {});
  const keepBf16 = opts.keepBf16 === true;
  const { f32, matrix, table, projection, head } = tensorReader(raw, onTensor, spec.quantization, keepBf16, opts.freshBytes === true, opts.placeBf16);
  // The lm head (with tied embeddings, the embedding's one matrix) where the kernel computes; an untied embedding not.
  const vocab = (name: string): VocabMatrix => (name === EMBED && !spec.tieWordEmbeddings ? table(name) : head(name));
  const stream = opts.streamExperts;
  return modelWeights(spec, f32, (l) => {
    const n = layerTensorNames(l);
    // In the order the tensors were always read (progress): experts, then the rest of the layer.
    const experts = stream ? storedExperts(stream, n.expert, spec, keepBf16) : expertWeights(matrix, n.expert, spec);
    return {
      inputNorm: f32(n.inputNorm),
      ...attentionWeights(projection, n),
      qNorm: f32(n.qNorm),
      kNorm: f32(n.kNorm),
      postAttnNorm: f32(n.postAttnNorm),
      router: f32(n.router),
      experts,
    };
  }, vocab);
}

