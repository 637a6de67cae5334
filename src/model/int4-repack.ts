// A 4-bit weight's stored tensors (int4-tensors.ts) repacked into the one form the engine holds, quant.ts's Int4Matrix,
// each value checked as it is copied (a NaN or infinite scale, GPTQ act-order groups, zero points a symmetric config
// does not allow, a weight_shape that disagrees: BAD_CHECKPOINT naming the tensor). The formats' conventions, as their
// references define them:
//   GPTQ: value k of column n is bits 4j of qweight[k / 8][n] (j = k % 8); column n's zero point in group g is bits 4j of
//     qzeros[g][n / 8] (j = n % 8), plus 1 in checkpoint_format "gptq" (v1 stores zero - 1); value = (q - z) x scale
//     (GPTQModel nn_modules/qlinear/__init__.py PackableQuantLinear.dequantize_weight, vLLM gptq.py's zeros + 1 and
//     its use_v2_format; the packing is vLLM quant_utils.py pack_quantized_values_into_int32). g_idx[k] = k / G.
//   AWQ (GEMM): column 8c + j of row k is bits 4 REVERSE_AWQ_ORDER[j] of qweight[k][c], REVERSE_AWQ_ORDER = [0, 4, 1, 5,
//     2, 6, 3, 7] (AutoAWQ packs column order_map[i] = [0, 2, 4, 6, 1, 3, 5, 7][i] into bits 4i); qzeros the same way;
//     value = (q - z) x scale (vLLM awq_triton.py awq_dequantize_kernel and its test's reverse_awq_order).
//   compressed-tensors pack-quantized: value 8i + j of row n is bits 4j of weight_packed[n][i], stored as q + 8 (signed
//     q in -8 .. 7); value = q x scale (compressed_tensors pack_quantized.py pack_to_int32 / unpack_from_int32).
// In the Int4Matrix a GPTQ row's words are qweight's words transposed, a compressed-tensors row is weight_packed's row
// as it is (its q + 8 read with zero point 8), and AWQ's nibbles are transposed one by one.
import { ResidencyError } from '../errors.ts';
import { int4Group, type Int4Spec } from './int4-config.ts';
import { int4Parts, type Int4Part, type Int4Role } from './int4-tensors.ts';
import type { Int4Matrix, Int4ScaleType } from './quant.ts';
import type { RawTensor } from './weights.ts';

/** AWQ's nibble of column j of a word (vLLM's AWQ_REVERSE_ORDER). */
export const REVERSE_AWQ_ORDER = [0, 4, 1, 5, 2, 6, 3, 7] as const;

/** Memory the repacked matrix is written to (a bank row's pieces); else it gets arrays of its own. */
export interface Int4Target {
  readonly data: Uint8Array;
  readonly scales: Uint16Array;
  readonly zeros: Uint8Array;
}

function corrupt(message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${message}; the checkpoint is corrupt or not the format config.json says (download or convert it again)`);
}

/** The 32-bit words of an I32 tensor (a view when its bytes are aligned, else a copy). */
function words(t: RawTensor): Uint32Array {
  const b = t.bytes;
  return b.byteOffset % 4 === 0 ? new Uint32Array(b.buffer, b.byteOffset, b.byteLength >> 2) : new Uint32Array(b.slice().buffer);
}

function halves(t: RawTensor): Uint16Array {
  const b = t.bytes;
  return b.byteOffset % 2 === 0 ? new Uint16Array(b.buffer, b.byteOffset, b.byteLength >> 1) : new Uint16Array(b.slice().buffer);
}

/** The scale type of a scale tensor's dtype. */
export function int4ScaleType(dtype: string): Int4ScaleType {
  return dtype === 'BF16' ? 'bf16' : 'f16';
}

/** Largest bf16 exponent field whose scale keeps 16 x scale finite in float32 (2^124 x 16 is 2^128). */
const BF16_MAX_EXPONENT = 250;

/** Refuses a NaN or infinite scale (or a bf16 one whose 16 x s overflows float32) among row-major [rows][groups] `s`. */
function checkScales(name: string, s: Uint16Array, type: Int4ScaleType, groups: number): void {
  for (let i = 0; i < s.length; i++) {
    const b = s[i]!;
    const e = type === 'f16' ? (b >> 10) & 31 : (b >> 7) & 255;
    if (type === 'f16' ? e === 31 : e > BF16_MAX_EXPONENT) {
      const top = type === 'f16' ? 31 : 255, mantissa = type === 'f16' ? b & 0x3ff : b & 0x7f;
      const what = e !== top ? 'so large that 16 x scale overflows float32' : mantissa !== 0 ? 'NaN' : 'infinite';
      throw corrupt(`tensor "${name}": the scale of output ${Math.floor(i / groups)} group ${i % groups} is ${what} (${type} bits 0x${b.toString(16).padStart(4, '0')})`);
    }
  }
}

/**
 * Weight `weight` ([rows][cols] = [N][K]) under `q` as an Int4Matrix, from its stored tensors (`get` returns each by
 * name, undefined when absent), into `into` when given (sized for the matrix: the scales' type is the stored one).
 */
export function int4Matrix(q: Int4Spec, weight: string, rows: number, cols: number, get: (name: string) => RawTensor | undefined, into?: Int4Target): Int4Matrix {
  const parts = int4Parts(q, weight, [rows, cols]);
  const tensor = (role: Int4Role): RawTensor | undefined => {
    const p = parts.find((x) => x.role === role);
    if (!p) return undefined;
    const t = get(p.name);
    if (!t) {
      if (p.optional) return undefined;
      throw corrupt(`tensor "${p.name}" is missing`);
    }
    checkPart(p, t);
    return t;
  };
  const G = int4Group(q, cols);
  const groups = cols / G;
  const scalesT = tensor('scales')!;
  const scaleType = int4ScaleType(scalesT.dtype);
  const data = into?.data ?? new Uint8Array((rows * cols) / 2);
  const scales = into?.scales ?? new Uint16Array(rows * groups);
  const zeros = q.zeroPoints ? (into?.zeros ?? new Uint8Array(rows * groups)) : new Uint8Array(0);
  if (data.length !== (rows * cols) / 2 || scales.length !== rows * groups || zeros.length !== (q.zeroPoints ? rows * groups : 0)) {
    throw new ResidencyError('INTERNAL', `int4Matrix: target arrays of ${data.length}, ${scales.length} and ${zeros.length} for a [${rows}][${cols}] matrix in groups of ${G}`);
  }
  const values = tensor('values')!;
  if (q.method === 'compressed-tensors') {
    checkShape(tensor('shape')!, rows, cols);
    data.set(values.bytes);
    scales.set(halves(scalesT));
  } else {
    transposeInto(scales, halves(scalesT), groups, rows);
    const zerosT = tensor('zeros')!;
    if (q.method === 'gptq') {
      gptqValues(data, words(values), rows, cols);
      const g = tensor('groups');
      if (g) checkGroups(g, G);
      packedZeros(zeros, zerosT, rows, groups, [0, 1, 2, 3, 4, 5, 6, 7], q.zeroOffset, q.zeroPoints);
    } else {
      awqValues(data, words(values), rows, cols);
      packedZeros(zeros, zerosT, rows, groups, REVERSE_AWQ_ORDER, 0, true);
    }
  }
  checkScales(scalesT.name, scales, scaleType, groups);
  return { format: 'int4', rows, cols, data, scales, scaleType, zeros, block: [1, G] };
}

/**
 * The [rows, cols] (= [N, K]) of 4-bit weight `weight` from its packed values tensor (checked against the config's
 * shapes at load: checkArchitecture over the stored tensors).
 */
export function int4StoredShape(q: Int4Spec, weight: string, shapeOf: (name: string) => readonly number[] | undefined): [number, number] {
  const m = weight.slice(0, -'.weight'.length);
  const name = q.method === 'compressed-tensors' ? `${m}.weight_packed` : `${m}.qweight`;
  const shape = shapeOf(name);
  if (!shape) throw corrupt(`tensor "${name}" is missing`);
  if (shape.length !== 2) throw corrupt(`tensor "${name}" has shape [${shape.join(', ')}], expected 2 dimensions`);
  const [a, b] = shape as [number, number];
  return q.method === 'gptq' ? [b, 8 * a] : q.method === 'awq' ? [8 * b, a] : [a, 8 * b];
}

function checkPart(p: Int4Part, t: RawTensor): void {
  if (!p.dtypes.includes(t.dtype)) throw corrupt(`tensor "${p.name}" is ${t.dtype}, expected ${p.dtypes.join(' or ')}`);
  if (t.shape.length !== p.shape.length || t.shape.some((d, i) => d !== p.shape[i])) {
    throw corrupt(`tensor "${p.name}" has shape [${t.shape.join(', ')}], expected [${p.shape.join(', ')}]`);
  }
}

/** out[c][r] = src[r][c] for src [rows][cols]. */
function transposeInto(out: Uint16Array, src: Uint16Array, rows: number, cols: number): void {
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = src[r * cols + c]!;
}

/** GPTQ's qweight [K/8][N]: word i of column n is word i of row n (both hold values 8i .. 8i + 7 at bits 4j). */
function gptqValues(data: Uint8Array, qw: Uint32Array, N: number, K: number): void {
  const per = K / 8;
  const out = data.byteOffset % 4 === 0 ? new Uint32Array(data.buffer, data.byteOffset, N * per) : new Uint32Array(N * per);
  for (let i = 0; i < per; i++) for (let n = 0; n < N; n++) out[n * per + i] = qw[i * N + n]!;
  if (out.buffer !== data.buffer) data.set(new Uint8Array(out.buffer));
}

/** AWQ's qweight [K][N/8]: column 8c + j of row k at nibble REVERSE_AWQ_ORDER[j]; rows k and k + 1 make a byte of row n. */
function awqValues(data: Uint8Array, qw: Uint32Array, N: number, K: number): void {
  const words8 = N / 8;
  const half = K / 2;
  for (let k = 0; k < K; k += 2) {
    for (let c = 0; c < words8; c++) {
      const a = qw[k * words8 + c]!;
      const b = qw[(k + 1) * words8 + c]!;
      for (let j = 0; j < 8; j++) {
        const sh = 4 * REVERSE_AWQ_ORDER[j]!;
        data[(8 * c + j) * half + (k >> 1)] = ((a >>> sh) & 15) | (((b >>> sh) & 15) << 4);
      }
    }
  }
}

/**
 * Zero points [groups][N/8] packed along N (column 8c + j at nibble order[j]) plus `offset`, into zeros [N][groups];
 * `keep` false (symmetric): each must be 8, and none is kept.
 */
function packedZeros(zeros: Uint8Array, t: RawTensor, N: number, groups: number, order: readonly number[], offset: number, keep: boolean): void {
  const qz = words(t);
  const per = N / 8;
  for (let g = 0; g < groups; g++) {
    for (let c = 0; c < per; c++) {
      const w = qz[g * per + c]!;
      for (let j = 0; j < 8; j++) {
        const z = ((w >>> (4 * order[j]!)) & 15) + offset;
        const n = 8 * c + j;
        if (keep) zeros[n * groups + g] = z;
        else if (z !== 8) {
          throw corrupt(`tensor "${t.name}": output ${n} group ${g} has zero point ${z}, but quantization_config.sym is true (every zero point 8${offset ? ', stored as 7' : ''})`);
        }
      }
    }
  }
}

/** GPTQ's g_idx: column k in group k / G (act-order checkpoints permute it; the groups here are consecutive columns). */
function checkGroups(t: RawTensor, G: number): void {
  const w = words(t);
  const v = new Int32Array(w.buffer, w.byteOffset, w.length);
  for (let k = 0; k < v.length; k++) {
    if (v[k] !== Math.floor(k / G)) {
      throw corrupt(`tensor "${t.name}": column ${k} is in group ${v[k]}, expected ${Math.floor(k / G)} (groups of ${G} consecutive columns); act-order (desc_act) groups are not supported`);
    }
  }
}

/** compressed-tensors' weight_shape must hold the weight's [N, K]. */
function checkShape(t: RawTensor, N: number, K: number): void {
  const dv = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
  const got = t.dtype === 'I64' ? [Number(dv.getBigInt64(0, true)), Number(dv.getBigInt64(8, true))] : [dv.getInt32(0, true), dv.getInt32(4, true)];
  if (got[0] !== N || got[1] !== K) throw corrupt(`tensor "${t.name}" holds [${got.join(', ')}], expected the weight's shape [${N}, ${K}]`);
}
