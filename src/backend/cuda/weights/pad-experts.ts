// The products read K in slices of 32 values. A bf16 model whose experts are narrower than that allows (tiny
// models: tiny-moe's 48 units) runs with zero units appended to every routed expert: gate and up rows of zeros give
// SwiGLU outputs of exactly 0, and the down product's zero columns add exact zeros, so the results are the
// unpadded model's. Checked against the CPU backend on the device (test/gpu/model.gpu.ts).
import { moeTensorNames } from '../../../model/architecture.ts';
import { moeLayerIds, type ModelSpec } from '../../../model/spec.ts';
import type { TensorInfo, TensorSource } from '../../../model/tensor-source.ts';

/** The kernels' unit of K (product.cuh: tensor-core tiles read K in slices of 32). */
export const K_SLICE = 32;

/** Whether the routed experts need padding for the kernels, and to how many units. */
export function paddedIntermediate(spec: ModelSpec): number {
  return Math.ceil(spec.expertIntermediate / K_SLICE) * K_SLICE;
}

/**
 * The spec and tensors the kernels compute on: `spec` and `source` themselves when the experts' width is already a
 * multiple of K_SLICE or they are not bf16 (quantized blocks cannot be padded; support.ts refuses those), else
 * every routed expert's gate and up [I, H] -> [Ip, H] and down [H, I] -> [H, Ip], zero-filled.
 */
export function padExpertsForKernels(spec: ModelSpec, source: TensorSource): { spec: ModelSpec; source: TensorSource } {
  const I = spec.expertIntermediate;
  const Ip = paddedIntermediate(spec);
  if (Ip === I || spec.quantization) return { spec, source };
  const H = spec.hiddenSize;
  // name -> which matrix of an expert it is
  const padded = new Map<string, 'rows' | 'cols'>();
  for (const l of moeLayerIds(spec)) {
    const names = moeTensorNames(spec, l);
    for (let e = 0; e < spec.numExperts; e++) {
      const n = names.expert(e);
      padded.set(n.gate, 'rows').set(n.up, 'rows').set(n.down, 'cols');
    }
  }
  // Only a tensor stored as expected is padded: any other is passed on as it is, for the layout checks to refuse.
  const howOf = (t: TensorInfo): 'rows' | 'cols' | undefined => {
    const how = padded.get(t.name);
    const want = how === 'rows' ? [I, H] : [H, I];
    return how && t.dtype === 'BF16' && t.shape.length === 2 && t.shape[0] === want[0] && t.shape[1] === want[1] ? how : undefined;
  };
  const info = (name: string): TensorInfo => {
    const t = source.info(name);
    const how = howOf(t);
    if (!how) return t;
    const shape = how === 'rows' ? [Ip, H] : [H, Ip];
    return { ...t, shape, bytes: 2 * Ip * H };
  };
  const read = (name: string, into: Uint8Array, offset = 0): void => {
    const t = source.info(name);
    const how = howOf(t);
    if (!how) return source.read(name, into, offset);
    const stored = new Uint8Array(t.bytes);
    source.read(name, stored);
    const whole = new Uint8Array(2 * Ip * H);
    if (how === 'rows') whole.set(stored);
    else for (let r = 0; r < H; r++) whole.set(stored.subarray(2 * I * r, 2 * I * (r + 1)), 2 * Ip * r);
    into.set(whole.subarray(offset, offset + into.byteLength));
  };
  let total = 0;
  for (const name of source.names()) total += info(name).bytes;
  return {
    spec: { ...spec, expertIntermediate: Ip },
    source: { names: () => source.names(), has: (n) => source.has(n), info, read, totalBytes: total, close: () => source.close() },
  };
}
