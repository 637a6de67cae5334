// The tensors a checkpoint must hold (hub names and shapes; qwen3_moe here, other families in families/),
// checked before any is converted.

import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from './spec.ts';
import { familyOf } from './families/index.ts';
import { attentionShapes, expertShapes, tensorMap } from './families/common.ts';
import { isInt4 } from './quant-config.ts';
import { storedInt4Shapes } from './int4-tensors.ts';

export { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames, type MoeNames } from './tensor-names.ts';
import { LM_HEAD, layerTensorNames, type MoeNames } from './tensor-names.ts';

/** Layer l's router and routed experts' tensor names in the spec's family (qwen3_moe's unless it names its own). */
export function moeTensorNames(spec: ModelSpec, l: number): MoeNames {
  return familyOf(spec.architecture)?.moeNames?.(l) ?? layerTensorNames(l);
}

/** Every tensor the spec needs, with its expected shape, in checkpoint order (embed, layers, norm, head). */
export function expectedTensors(spec: ModelSpec): Map<string, readonly number[]> {
  const family = familyOf(spec.architecture);
  if (family) return family.tensors(spec);
  const { hiddenSize: H, headDim: hd, numExperts: E } = spec;
  return tensorMap(spec, (out, l) => {
    const n = layerTensorNames(l);
    out.set(n.inputNorm, [H]);
    attentionShapes(out, n, spec);
    out.set(n.qNorm, [hd]);
    out.set(n.kNorm, [hd]);
    out.set(n.postAttnNorm, [H]);
    out.set(n.router, [E, H]);
    expertShapes(out, n.expert, spec);
  });
}

/**
 * The tensors the checkpoint stores for the spec, with their shapes: expectedTensors, each weight the config stores in
 * 4 bits replaced by its stored tensors (int4-tensors.ts: GPTQ's qweight / qzeros / scales, ...).
 */
export function storedTensors(spec: ModelSpec): Map<string, readonly number[]> {
  const q = spec.quantization;
  const expected = expectedTensors(spec);
  return isInt4(q) ? storedInt4Shapes(q, expected) : expected;
}

/**
 * Checks that every needed tensor (storedTensors) is present with the right shape. Extra tensors (e.g. an lm_head
 * saved despite tied embeddings) are allowed and ignored, as transformers does.
 */
export function checkArchitecture(
  spec: ModelSpec,
  shapes: ReadonlyMap<string, { readonly shape: readonly number[]; readonly file?: string }>,
): void {
  const missing: string[] = [];
  for (const [name, want] of storedTensors(spec)) {
    const got = shapes.get(name);
    if (!got) {
      missing.push(name);
      continue;
    }
    if (got.shape.length !== want.length || got.shape.some((d, i) => d !== want[i])) {
      const where = got.file ? `${got.file}: ` : '';
      throw new ResidencyError('BAD_CHECKPOINT',
        `${where}tensor "${name}" has shape [${got.shape.join(', ')}] but config.json implies [${want.join(', ')}]`);
    }
  }
  if (missing.length > 0) {
    const shown = missing.slice(0, 3).map((m) => `"${m}"`).join(', ');
    const more = missing.length > 3 ? ` and ${missing.length - 3} more` : '';
    const packed = missing.find((m) => m.endsWith('.weight') && ['qweight', 'weight_packed'].some((p) => shapes.has(`${m.slice(0, -'weight'.length)}${p}`)));
    const hint = missing.includes(LM_HEAD) ? ' (config.json says tie_word_embeddings is false)'
      : packed ? ` ("${packed}" is stored in 4 bits, but the engine reads it as stored floats: only linear projections (*_proj) that quantization_config quantizes are read in 4 bits)`
      : '';
    throw new ResidencyError('BAD_CHECKPOINT', `checkpoint is missing ${missing.length} tensor(s) the ${spec.architecture} architecture needs: ${shown}${more}${hint}`);
  }
}
