// A TensorSource of headers alone (dtypes and shapes, no values): what the memory plan and the weight layouts
// read, at any size without the bytes. Reads are refused. For tests (memory plans and layouts at real shapes).
import { ResidencyError } from '../../../errors.ts';
import { expectedTensors } from '../../../model/architecture.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import { fp8ScaleName } from '../../../model/quant-read.ts';
import { quantInfoOf, type TensorInfo, type TensorSource } from '../../../model/tensor-source.ts';

const BYTES: Record<string, number> = { BF16: 2, F16: 2, F32: 4, F8_E4M3: 1, U8: 1 };

/**
 * The model's expected tensors as `dtypeOf(name)` stores them (default BF16); with spec.quantization fp8,
 * an F8_E4M3 weight gets its float32 `_scale_inv` grid beside it.
 */
export function headerSource(spec: ModelSpec, dtypeOf: (name: string) => string = () => 'BF16'): TensorSource {
  const infos = new Map<string, TensorInfo>();
  const add = (name: string, dtype: string, shape: readonly number[]): void => {
    infos.set(name, { name, dtype, shape, bytes: BYTES[dtype]! * shape.reduce((a, b) => a * b, 1) });
  };
  for (const [name, shape] of expectedTensors(spec)) {
    const dtype = dtypeOf(name);
    add(name, dtype, shape);
    if (dtype === 'F8_E4M3' && spec.quantization?.method === 'fp8') {
      const [br, bc] = spec.quantization.blockSize;
      add(fp8ScaleName(name), 'F32', [Math.ceil(shape[0]! / br), Math.ceil(shape[1]! / bc)]);
    }
  }
  let total = 0;
  for (const t of infos.values()) total += t.bytes;
  const info = (name: string): TensorInfo => {
    const t = infos.get(name);
    if (!t) throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} is missing`);
    const q = quantInfoOf(spec.quantization, name, t.dtype, t.shape, (n) => infos.has(n));
    return q ? { ...t, quant: q } : t;
  };
  return {
    names: () => infos.keys(),
    has: (name) => infos.has(name),
    info,
    read(name) {
      throw new ResidencyError('INTERNAL', `headerSource holds no values (read of ${name})`);
    },
    totalBytes: total,
    close() {},
  };
}

/** Block FP8 for every linear projection (`*_proj.weight`), bf16 for the rest: how FP8 checkpoints store them. */
export const fp8Projections = (name: string): string => (/_proj\.weight$/.test(name) ? 'F8_E4M3' : 'BF16');
