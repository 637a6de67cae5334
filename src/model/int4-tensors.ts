// The tensors a 4-bit linear weight is stored as in each format's hub layout (names, dtypes, shapes), so the headers
// are checked before a weight byte is read. Weight X.weight [N][K] (out, in) in groups of G along K is stored as
//   gptq (vLLM gptq.py create_weights):  X.qweight I32 [K/8][N], eight values of a column a word along K (value 8i + j
//        at bits 4j); X.qzeros I32 [K/G][N/8], eight columns' zero points a word along N; X.scales [K/G][N];
//        X.g_idx I32 [K] (may be absent)
//   awq (vLLM awq.py create_weights):    X.qweight I32 [K][N/8], eight columns a word along N in AWQ's order;
//        X.qzeros I32 [K/G][N/8] likewise; X.scales [K/G][N]
//   compressed-tensors pack-quantized (PackedQuantizationCompressor.compression_param_info):
//        X.weight_packed I32 [N][K/8], along K; X.weight_scale [N][K/G]; X.weight_shape I32 or I64 [2], holding [N, K]
// scales F16 or BF16. int4-repack.ts reads their values.
import { ResidencyError } from '../errors.ts';
import { int4Group, int4Module, type Int4Spec } from './int4-config.ts';

/** What a stored tensor of a 4-bit weight holds. */
export type Int4Role = 'values' | 'zeros' | 'scales' | 'groups' | 'shape';

export interface Int4Part {
  readonly name: string;
  readonly role: Int4Role;
  readonly shape: readonly number[];
  readonly dtypes: readonly string[];
  /** May be absent from the checkpoint (GPTQ's g_idx). */
  readonly optional?: boolean;
}

const SCALE_DTYPES = ['F16', 'BF16'] as const;

function refuse(module: string, message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${module}: ${message}`);
}

/** Whether tensor `name` of shape `shape` is a linear weight `q` stores in 4 bits. */
export function isInt4Weight(q: Int4Spec, name: string, shape: readonly number[]): boolean {
  return shape.length === 2 && name.endsWith('.weight') && int4Module(q, name.slice(0, -'.weight'.length));
}

/**
 * The stored tensors of weight `weight` ([N][K]) under `q`, refusing (naming the module) a shape the format cannot pack:
 * K not a multiple of 8 (a word of values), N not one where zero points pack along it, a group not dividing K.
 */
export function int4Parts(q: Int4Spec, weight: string, [N, K]: readonly number[]): Int4Part[] {
  const m = weight.slice(0, -'.weight'.length);
  const G = int4Group(q, K!);
  const format = `${q.method} (quantization_config)`;
  if (K! % 8 !== 0) throw refuse(m, `its input size ${K} is not a multiple of 8: ${format} packs eight 4-bit values a word along it`);
  if (K! % G !== 0) throw refuse(m, `quantization_config group size ${G} does not divide its input size ${K}`);
  const groups = K! / G;
  if (q.method === 'compressed-tensors') {
    return [
      { name: `${m}.weight_packed`, role: 'values', shape: [N!, K! / 8], dtypes: ['I32'] },
      { name: `${m}.weight_scale`, role: 'scales', shape: [N!, groups], dtypes: SCALE_DTYPES },
      { name: `${m}.weight_shape`, role: 'shape', shape: [2], dtypes: ['I32', 'I64'] },
    ];
  }
  if (N! % 8 !== 0) throw refuse(m, `its output size ${N} is not a multiple of 8: ${format} packs eight zero points a word along it`);
  const zeros: Int4Part = { name: `${m}.qzeros`, role: 'zeros', shape: [groups, N! / 8], dtypes: ['I32'] };
  const scales: Int4Part = { name: `${m}.scales`, role: 'scales', shape: [groups, N!], dtypes: SCALE_DTYPES };
  if (q.method === 'awq') return [{ name: `${m}.qweight`, role: 'values', shape: [K!, N! / 8], dtypes: ['I32'] }, zeros, scales];
  return [
    { name: `${m}.qweight`, role: 'values', shape: [K! / 8, N!], dtypes: ['I32'] }, zeros, scales,
    { name: `${m}.g_idx`, role: 'groups', shape: [K!], dtypes: ['I32'], optional: true },
  ];
}

/**
 * The tensors a checkpoint stores for `expected` (a spec's tensor map): each 4-bit weight replaced by its required
 * stored tensors (int4Parts), everything else as it is.
 */
export function storedInt4Shapes(q: Int4Spec, expected: ReadonlyMap<string, readonly number[]>): Map<string, readonly number[]> {
  const out = new Map<string, readonly number[]>();
  for (const [name, shape] of expected) {
    if (!isInt4Weight(q, name, shape)) out.set(name, shape);
    else for (const p of int4Parts(q, name, shape)) if (!p.optional) out.set(p.name, p.shape);
  }
  return out;
}
