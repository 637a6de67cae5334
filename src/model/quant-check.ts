// The dtypes and scale tensors a quantized checkpoint must hold, checked from the headers alone (with the
// tensor map's shapes, before any weight byte is read): which tensors may be stored quantized, that each
// FP8 weight has its scales in the block shape config.json declares, that packed data is U8, and that a 4-bit weight's
// stored tensors have their format's dtypes (int4-tensors.ts; their shapes are checkArchitecture's).
import { ResidencyError } from '../errors.ts';
import { expectedTensors } from './architecture.ts';
import { isInt4, notConverted } from './quant-config.ts';
import { int4Parts, isInt4Weight } from './int4-tensors.ts';
import { fp8ScaleName } from './quant-read.ts';
import type { ModelSpec } from './spec.ts';

/** Linear projections: the only tensors block FP8 stores (routers, embeddings, norms and lm_head never). */
const LINEAR = /_proj(_with_mqa)?\.weight$/;
/** gpt-oss's packed expert tensors. */
const MXFP4_PACKED = /_(blocks|scales)$/;

export interface HeaderTensor {
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly file?: string;
}

function bad(t: HeaderTensor, message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${t.file ? `${t.file}: ` : ''}${message}`);
}

/** Refuses dtypes and scale tensors that do not match spec.quantization (checkArchitecture must have passed). */
export function checkQuantTensors(spec: ModelSpec, tensors: ReadonlyMap<string, HeaderTensor>): void {
  const q = spec.quantization;
  for (const [name, shape] of expectedTensors(spec)) {
    if (isInt4(q) && isInt4Weight(q, name, shape)) {
      for (const p of int4Parts(q, name, shape)) {
        const t = tensors.get(p.name);
        if (t && !p.dtypes.includes(t.dtype)) throw bad(t, `tensor "${p.name}" is ${t.dtype}: ${q.method} ${p.role} are ${p.dtypes.join(' or ')}`);
      }
      continue;
    }
    const t = tensors.get(name)!;
    if (t.dtype === 'F8_E4M3') {
      if (q?.method !== 'fp8') {
        throw bad(t, `tensor "${name}" is F8_E4M3 but config.json has no quantization_config with quant_method "fp8"`);
      }
      if (!LINEAR.test(name)) {
        throw bad(t, `tensor "${name}" is F8_E4M3, but only linear projections (*_proj.weight) may be block FP8; routers, embeddings, norms and lm_head must be BF16, F16 or F32`);
      }
      const module = name.slice(0, -'.weight'.length);
      if (notConverted(q, module)) throw bad(t, `tensor "${name}" is F8_E4M3 but config.json quantization_config.modules_to_not_convert lists ${module}`);
      const sName = fp8ScaleName(name);
      const s = tensors.get(sName);
      if (!s) throw bad(t, `tensor "${name}" is F8_E4M3 but its block scales "${sName}" are missing`);
      if (s.dtype !== 'F32' && s.dtype !== 'BF16') throw bad(s, `tensor "${sName}" is ${s.dtype}: FP8 block scales must be F32 or BF16`);
      const [br, bc] = q.blockSize;
      const want = [Math.ceil(t.shape[0]! / br), Math.ceil(t.shape[1]! / bc)];
      if (s.shape.length !== 2 || s.shape[0] !== want[0] || s.shape[1] !== want[1]) {
        throw bad(s, `tensor "${sName}" has shape [${s.shape.join(', ')}] but the [${t.shape.join(', ')}] weight in blocks of [${br}, ${bc}] (quantization_config.weight_block_size) needs [${want.join(', ')}]`);
      }
    } else if (q?.method === 'mxfp4' && MXFP4_PACKED.test(name)) {
      if (t.dtype !== 'U8') throw bad(t, `tensor "${name}" is ${t.dtype}: MXFP4 blocks and scales are U8`);
    } else if (t.dtype === 'U8' || t.dtype === 'I32' || t.dtype === 'I64') {
      throw bad(t, `tensor "${name}" is ${t.dtype} where a float tensor (BF16, F16 or F32) is expected`);
    }
  }
}
