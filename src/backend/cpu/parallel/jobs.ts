// Runs chunks of the current job on whichever thread claims them: the same kernels as the serial
// compute, so a row's result never depends on which thread computed it.
import { addNorm, linearRows } from '../linalg.ts';
import { computeExpertUnits } from '../expert-units.ts';
import { attentionHead, qkvPrologue, type QkvShape } from '../attention-ops.ts';
import { ARGS, ATTN_UNIT, BOUNDS, CHUNKS, CLAIM, OP, OP_ATTENTION, OP_EXPERTS, OP_LINEAR, OP_QUANT_EXPERTS, OP_ROUTE, OP_QKV, OP_ADD_NORM, QKV_UNIT, getF64 } from './layout.ts';
import { routeTokens } from '../moe-ops.ts';
import { computeQuantUnits, type QuantExpert } from '../quant-linear.ts';
import { ResidencyError } from '../../../errors.ts';
import type { SimdKernel } from '../wasm/kernel.ts';
import type { KvDtypeCode } from '../../kv-dtype.ts';
import { computeExpertUnitsSimd, type ExpertScratch } from '../wasm/experts.ts';
import { attentionHeadSimd } from '../wasm/attention.ts';

export type Table = (Float32Array | Int32Array | undefined)[];

/**
 * Thread-local scratch, grown on demand: the SwiGLU activations (2*I), attention scores and sums; and
 * this thread's instance of the SIMD kernel when the backend runs it.
 */
export interface JobScratch {
  act: Float32Array;
  scores: Float64Array;
  acc: Float64Array;
  simd: SimdKernel | null;
  /** This thread's expert-unit scratch in the kernel's memory. */
  simdExperts: ExpertScratch | null;
  /** This thread's attention scratch in the kernel's memory. */
  simdScores: Float64Array | null;
  simdAcc: Float64Array | null;
  /** Quantized banks: the views of every bank row and their size in words. */
  quant: { readonly rows: readonly (readonly QuantExpert[])[]; readonly rowSize: number } | null;
}

export function jobScratch(): JobScratch {
  return { act: new Float32Array(0), scores: new Float64Array(0), acc: new Float64Array(0), simd: null, simdExperts: null, simdScores: null, simdAcc: null, quant: null };
}

function f32(t: Table, id: number): Float32Array {
  const a = t[id];
  if (!(a instanceof Float32Array)) throw new ResidencyError('INTERNAL', `cpu threads: array ${id} is not a registered Float32Array`);
  return a;
}

function i32(t: Table, id: number): Int32Array {
  const a = t[id];
  if (!(a instanceof Int32Array)) throw new ResidencyError('INTERNAL', `cpu threads: array ${id} is not a registered Int32Array`);
  return a;
}

/** Claims and runs chunks of the job in the control block until none are left; returns how many it ran. */
export function claimChunks(ctl: Int32Array, table: Table, banks: readonly Float32Array[], s: JobScratch): number {
  const op = ctl[OP]!;
  const n = ctl[CHUNKS]!;
  const a = ARGS;
  let ran = 0;
  for (let c = Atomics.add(ctl, CLAIM, 1); c < n; c = Atomics.add(ctl, CLAIM, 1)) {
    const lo = ctl[BOUNDS + c]!;
    const hi = ctl[BOUNDS + c + 1]!;
    if (op === OP_LINEAR && ctl[a + 7]! >= 1) {
      // Staged by the main thread (wasm/stage.ts): the row tables' and the weights' byte addresses.
      if (s.simd === null) throw new ResidencyError('INTERNAL', 'cpu threads: a SIMD job reached a thread without the kernel');
      const f = ctl[a + 7] === 2 ? s.simd.linearBf16At : s.simd.linearAt;
      f(ctl[a + 8]!, ctl[a + 10]!, ctl[a + 9]!, ctl[a + 4]!, ctl[a + 6]!, lo, hi);
    } else if (op === OP_LINEAR) {
      linearRows(f32(table, ctl[a]!), f32(table, ctl[a + 1]!), ctl[a + 2]!, f32(table, ctl[a + 3]!), ctl[a + 4]!, ctl[a + 5]!, ctl[a + 6]!, lo, hi);
    } else if (op === OP_ADD_NORM) {
      addNorm(f32(table, ctl[a]!), f32(table, ctl[a + 1]!), f32(table, ctl[a + 2]!), f32(table, ctl[a + 3]!), lo, hi, ctl[a + 4]!, getF64(ctl, a + 5));
    } else if (op === OP_QKV) {
      // The chunk's tokens: their stacked q|k|v rows (each output the same dot whatever the split), then each prologue.
      const qkv = f32(table, ctl[a]!);
      const [heads, kvHeads, d, H] = [ctl[a + 5]!, ctl[a + 6]!, ctl[a + 7]!, ctl[a + 8]!];
      const W = (heads + 2 * kvHeads) * d;
      if (ctl[a + 18] === 1) {
        if (s.simd === null) throw new ResidencyError('INTERNAL', 'cpu threads: a SIMD job reached a thread without the kernel');
        s.simd.linearAt(ctl[a + 19]! + 4 * lo, ctl[a + 21]!, ctl[a + 20]! + 4 * lo, hi - lo, H, 0, W);
      } else linearRows(qkv.subarray(lo * W), f32(table, ctl[a + 1]!), 0, f32(table, ctl[a + 2]!).subarray(lo * H), hi - lo, W, H, 0, W);
      const shape: QkvShape = {
        heads, kvHeads, d, qNorm: f32(table, ctl[a + 9]!), kNorm: f32(table, ctl[a + 10]!), cos: f32(table, ctl[a + 11]!), sin: f32(table, ctl[a + 12]!),
        kvDtype: ctl[a + 15]! as KvDtypeCode, eps: getF64(ctl, a + 16),
      };
      const q = f32(table, ctl[a + 3]!);
      const units = i32(table, ctl[a + 4]!);
      const keys = f32(table, ctl[a + 13]!);
      const values = f32(table, ctl[a + 14]!);
      for (let i = lo; i < hi; i++) {
        const u = i * QKV_UNIT;
        qkvPrologue(qkv, q, keys, values, i, units[u]!, units[u + 1]!, shape);
      }
    } else if (op === OP_ROUTE) {
      // The chunk's tokens: their logits (every router row, each output the same dot whatever the split), then routed.
      const logits = f32(table, ctl[a]!);
      const E = ctl[a + 6]!;
      const H = ctl[a + 7]!;
      if (ctl[a + 10] === 1) {
        if (s.simd === null) throw new ResidencyError('INTERNAL', 'cpu threads: a SIMD job reached a thread without the kernel');
        s.simd.linearAt(ctl[a + 11]! + 4 * lo, ctl[a + 13]!, ctl[a + 12]! + 4 * lo, hi - lo, H, 0, E);
      } else linearRows(logits.subarray(lo * E), f32(table, ctl[a + 4]!), 0, f32(table, ctl[a + 5]!).subarray(lo * H), hi - lo, E, H, 0, E);
      routeTokens(logits, f32(table, ctl[a + 1]!), i32(table, ctl[a + 2]!), f32(table, ctl[a + 3]!), lo, hi, E, ctl[a + 8]!, ctl[a + 9] === 1);
    } else if (op === OP_EXPERTS && ctl[a + 6] === 1) {
      if (s.simd === null || s.simdExperts === null) throw new ResidencyError('INTERNAL', 'cpu threads: a SIMD job reached a thread without the kernel');
      const layout = { bf16: ctl[a + 8] === 1, gate: ctl[a + 9]!, up: ctl[a + 10]!, down: ctl[a + 11]! };
      computeExpertUnitsSimd(s.simd, s.simdExperts, f32(table, ctl[a]!), i32(table, ctl[a + 1]!), i32(table, ctl[a + 2]!), lo, hi, banks, ctl[a + 7]!, ctl[a + 4]!, ctl[a + 5]!, layout);
    } else if (op === OP_EXPERTS) {
      const inter = ctl[a + 5]!;
      if (s.act.length < 2 * inter) s.act = new Float32Array(2 * inter);
      computeExpertUnits(f32(table, ctl[a]!), i32(table, ctl[a + 1]!), i32(table, ctl[a + 2]!), lo, hi, banks, f32(table, ctl[a + 3]!), ctl[a + 4]!, inter, s.act);
    } else if (op === OP_QUANT_EXPERTS) {
      if (s.quant === null) throw new ResidencyError('INTERNAL', 'cpu threads: a quantized experts job reached a thread without the quantized banks');
      const inter = ctl[a + 5]!;
      if (s.act.length < 2 * inter) s.act = new Float32Array(2 * inter);
      computeQuantUnits(f32(table, ctl[a]!), i32(table, ctl[a + 1]!), i32(table, ctl[a + 2]!), lo, hi, s.quant.rows, s.quant.rowSize, f32(table, ctl[a + 3]!), ctl[a + 4]!, inter, s.act);
    } else if (op === OP_ATTENTION) {
      const out = f32(table, ctl[a]!);
      const q = f32(table, ctl[a + 1]!);
      const units = i32(table, ctl[a + 2]!);
      const heads = ctl[a + 3]!;
      const kvHeads = ctl[a + 4]!;
      const d = ctl[a + 5]!;
      const simd = ctl[a + 6] === 1;
      const keys = f32(table, ctl[a + 7]!);
      const values = f32(table, ctl[a + 8]!);
      const tables = i32(table, ctl[a + 9]!);
      const bs = ctl[a + 10]!;
      if (simd && (s.simd === null || s.simdScores === null || s.simdAcc === null)) {
        throw new ResidencyError('INTERNAL', 'cpu threads: a SIMD job reached a thread without the kernel');
      }
      if (s.acc.length < d) s.acc = new Float64Array(d);
      for (let n = lo; n < hi; n++) {
        const u = n * ATTN_UNIT;
        const pos = units[u]!;
        if (s.scores.length <= pos) s.scores = new Float64Array(Math.max(pos + 1, 2 * s.scores.length));
        const off = units[u + 1]!;
        if (simd) {
          attentionHeadSimd(s.simd!, out, off, q, off, keys, values, tables, units[u + 3]!, bs, pos, units[u + 2]!, heads, kvHeads, d, s.simdScores!, s.simdAcc!);
          continue;
        }
        attentionHead(out, off, q, off, keys, values, tables, units[u + 3]!, bs, pos, units[u + 2]!, heads, kvHeads, d, s.scores, s.acc);
      }
    } else {
      throw new ResidencyError('INTERNAL', `cpu threads: unknown op ${op}`);
    }
    ran++;
  }
  return ran;
}
