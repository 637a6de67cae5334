// Where the CPU backend's non-expert weights live, placed once when it is created: with SIMD, in the kernel's
// wasm memory (float32 copies, and bf16 matrices kept as stored, which its bf16 linear computes on); with threads,
// in shared memory every worker reads; else where the load put them. Quantized projections other than bf16 stay as
// stored (quant-linear.ts, on the calling thread). Also: q, k and v rows stacked for the threads' and the kernel's
// one product, the RoPE tables, and (takeExperts) the loaded weights pointed at the copies so the originals go.
import { moeLayerIds, type ModelSpec } from '../../model/spec.ts';
import type { LayerWeights, MlaWeights, ModelWeights, VocabMatrix } from '../../model/weights.ts';
import { isBf16, isQuantized, type Matrix } from '../../model/quant.ts';
import { expertRowFormat } from './expert-rows.ts';
import type { QkvShape } from './attention-ops.ts';
import type { KvDtypeCode } from '../kv-dtype.ts';
import { ropeTablesFor } from './family-attention.ts';
import { sharedAlloc, sharedCopy, type Alloc } from './alloc.ts';
import type { WasmArena } from './wasm/arena.ts';

/** A layer's q, k and v projections as computed when not stacked (bf16 kept as stored: copies in the kernel's memory). */
export interface QkvProjs { readonly q: Matrix; readonly k: Matrix; readonly v: Matrix }
/** A layer's input and post-attention RMSNorm weights. */
export interface LayerNorms { readonly input: Float32Array; readonly post: Float32Array }

export interface PlacedWeights {
  /** The lm head where every thread (or the kernel) reads it; bf16 kept as stored, as stored. */
  readonly lmHead: VocabMatrix;
  /** Per layer its router (placed for MoE layers only). */
  readonly routers: Float32Array[];
  readonly oProjs: Matrix[];
  readonly qkvProjs: QkvProjs[];
  /** Threads or SIMD, float32 q/k/v: per layer the q, k and v rows stacked in one matrix (else null). */
  readonly qkv: (Float32Array | null)[];
  readonly norms: LayerNorms[];
  /** The RoPE tables, shared by the serial ops and the q/k/v jobs. */
  readonly cos: Float32Array;
  readonly sin: Float32Array;
  /** Per layer with a stacked q/k/v, no biases and per-head q/k norms (Qwen3): the prologue's shape (compute.qkv). */
  readonly qkvShapes: (QkvShape | null)[];
  /** MLA projections (DeepSeek), placed as the others. */
  readonly mla: (MlaWeights | null)[];
}

export interface PlaceOptions {
  /** The kernel's memory (SIMD), or null. */
  readonly arena: WasmArena | null;
  readonly threads: number;
  /** The backend takes these weights (takeExperts): point them at the copies placed here. */
  readonly take: boolean;
  /** How the KV cache stores keys and values (kv-dtype.ts code; default float32). */
  readonly kvDtype?: KvDtypeCode;
}

/** Places the non-expert weights for a backend (see the file's head). */
export function placeWeights(spec: ModelSpec, weights: ModelWeights, o: PlaceOptions): PlacedWeights {
  const { arena, threads } = o;
  const share = (a: Float32Array): Float32Array => (arena ? arena.copy(a) : threads > 1 ? sharedCopy(a) : a);
  const bf16InArena = (m: Matrix): Matrix => (isBf16(m) && arena && !arena.holds(m.data) ? arena.bf16(m) : m);
  const shareMatrix = (m: Matrix): Matrix => (!isQuantized(m) ? share(m) : bf16InArena(m));
  const moe = new Set(moeLayerIds(spec));
  const lmHead = shareMatrix(weights.lmHead) as VocabMatrix;
  const routers = weights.layers.map((w, l) => (moe.has(l) ? share(w.router) : w.router));
  const oProjs = weights.layers.map((w) => shareMatrix(w.oProj));
  // bf16 q, k and v kept as stored: in the kernel's memory (float32 ones are stacked below, or stay where they are).
  const qkvProjs = weights.layers.map((w) => ({ q: bf16InArena(w.qProj), k: bf16InArena(w.kProj), v: bf16InArena(w.vProj) }));
  const qkv = weights.layers.map((w) => {
    const { qProj: q, kProj: k, vProj: v } = w;
    if (spec.mla || !(threads > 1 || arena) || isQuantized(q) || isQuantized(k) || isQuantized(v)) return null;
    return stackRows(arena ?? sharedAlloc, q, k, v);
  });
  if (o.take && arena) takeStoredCopies(weights, lmHead, oProjs, qkvProjs);
  const norms = weights.layers.map((w) => ({ input: share(w.inputNorm), post: share(w.postAttnNorm) }));
  const rope = ropeTablesFor(spec);
  const cos = share(rope.cos);
  const sin = share(rope.sin);
  const qkvShapes = weights.layers.map((w, l): QkvShape | null => {
    if (!qkv[l] || w.qBias || w.kBias || w.vBias || (spec.qkNorm ?? 'head') !== 'head') return null;
    return { heads: spec.numHeads, kvHeads: spec.numKvHeads, d: spec.headDim, qNorm: share(w.qNorm), kNorm: share(w.kNorm), eps: spec.rmsNormEps, cos, sin, kvDtype: o.kvDtype ?? 0 };
  });
  const mla = weights.layers.map((w) => (w.mla ? { ...w.mla, qA: shareMatrix(w.mla.qA), qB: shareMatrix(w.mla.qB), kvA: shareMatrix(w.mla.kvA), kvB: shareMatrix(w.mla.kvB) } : null));
  return { lmHead, routers, oProjs, qkvProjs, qkv, norms, cos, sin, qkvShapes, mla };
}

/**
 * Bytes the SIMD arena holds before the first step: a float32 lm head, routers, float32 o and q/k/v projections,
 * banks (expert rows as the banks store them: float32, or quantized experts' stored bytes).
 */
export function linearBytes(spec: ModelSpec, weights: ModelWeights): number {
  const H = spec.hiddenSize;
  const moe = moeLayerIds(spec);
  const rowWords = expertRowFormat(spec, moe.flatMap((l) => weights.layers[l]!.experts)).words;
  let projections = 0;
  // float32 matrices 4 bytes a value, bf16 ones kept as stored 2 (placed as stored), other formats none (not placed).
  const bytesOf = (m: Matrix): number => (!isQuantized(m) ? 4 * m.length : isBf16(m) ? 2 * m.data.length : 0);
  for (const w of weights.layers) for (const m of [w.qProj, w.kProj, w.vProj, w.oProj]) projections += bytesOf(m);
  // (KV caches and per-thread scratch grow the memory as sequences open; so does the memory when the
  // families' extra projections are placed, so this need not count them.)
  return bytesOf(weights.lmHead) + 4 * moe.length * spec.numExperts * (H + rowWords) + projections + (1 << 20);
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * takeExperts (the weights serve this backend alone): the loaded weights point at the kernel-memory copies of the
 * bf16 matrices kept as stored (lm head, tied embedding, projections), so the originals are freed rather than held
 * beside their copies (at Qwen3-30B-A3B shapes the lm head alone is 622 MB). Float32 ones stay (stacked, or small).
 */
function takeStoredCopies(weights: ModelWeights, lmHead: VocabMatrix, oProjs: readonly Matrix[], qkv: readonly QkvProjs[]): void {
  const w = weights as Mutable<ModelWeights>;
  if (isBf16(w.lmHead)) {
    if (w.embed === w.lmHead) w.embed = lmHead;
    w.lmHead = lmHead;
  }
  weights.layers.forEach((layer, l) => {
    const m = layer as Mutable<LayerWeights>;
    if (isBf16(m.oProj)) m.oProj = oProjs[l]!;
    if (isBf16(m.qProj)) m.qProj = qkv[l]!.q;
    if (isBf16(m.kProj)) m.kProj = qkv[l]!.k;
    if (isBf16(m.vProj)) m.vProj = qkv[l]!.v;
  });
}

/** The rows of several [rows][H] matrices stacked into one matrix from `alloc` (shared or wasm memory). */
function stackRows(alloc: Alloc, ...ms: Float32Array[]): Float32Array {
  let n = 0;
  for (const m of ms) n += m.length;
  const out = alloc.f32(n);
  let at = 0;
  for (const m of ms) {
    out.set(m, at);
    at += m.length;
  }
  return out;
}
