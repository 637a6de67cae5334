// The ops the CPU backend may share out between threads, behind one interface: a linear layer (split by
// output rows), Qwen3's q/k/v with its prologue, a layer's router and the residual adds with their norms (split by
// tokens), its expert units (split by units) and attention. The serial compute here is the
// reference; the thread pool (parallel/pool.ts) runs the same code on parts of the rows.
import { addNorm, linear } from './linalg.ts';
import { computeExpertUnits } from './expert-units.ts';
import { attention, qkvPrologue, type KvPages, type QkvShape } from './attention-ops.ts';
import { inArena, simdLinear, type SimdKernel } from './wasm/kernel.ts';
import { computeExpertUnitsSimd, simdQuantRows, type ExpertScratch, type SimdRowLayout } from './wasm/experts.ts';
import type { TabStage } from './wasm/stage.ts';
import type { WasmArena } from './wasm/arena.ts';
import { attentionHeadSimd } from './wasm/attention.ts';
import { computeQuantUnits, linearQ, type QuantExpert } from './quant-linear.ts';
import type { Bf16Matrix } from '../../model/quant.ts';
import type { QuantRowLayout } from './expert-rows.ts';
import { ResidencyError } from '../../errors.ts';
import { combinePicks, routeTokens } from './moe-ops.ts';

/**
 * The SIMD kernel, its memory, the main thread's staging of kernel inputs, and per thread (main first) scratch in
 * that memory: expert units (wasm/experts.ts), attention scores (maxPositions float64) and sums (headDim float64).
 */
export interface SimdCompute {
  readonly arena: WasmArena;
  readonly kernel: SimdKernel;
  readonly stage: TabStage;
  readonly experts: readonly ExpertScratch[];
  readonly scores: readonly Float64Array[];
  readonly accs: readonly Float64Array[];
}

/** Whether attention over these arrays can run through the kernel (all of them in its memory). */
export function simdAttention(simd: SimdCompute | undefined, out: Float32Array, q: Float32Array, keys: Float32Array, values: Float32Array): boolean {
  return simd !== undefined && simd.arena.holds(out) && simd.arena.holds(q) && simd.arena.holds(keys) && simd.arena.holds(values);
}

/** Every head of `tokens` tokens through the kernel on the calling thread (scratch: thread 0's). */
export function attentionSimd(simd: SimdCompute, out: Float32Array, q: Float32Array, tokens: number, keys: Float32Array, values: Float32Array, pages: KvPages, pos: Int32Array, heads: number, kvHeads: number, d: number): void {
  const w = heads * d;
  for (let i = 0; i < tokens; i++) {
    for (let h = 0; h < heads; h++) {
      attentionHeadSimd(simd.kernel, out, i * w, q, i * w, keys, values, pages.table, pages.tableOf[i]!, pages.blockSize, pos[i]!, h, heads, kvHeads, d, simd.scores[0]!, simd.accs[0]!);
    }
  }
}

/** moe-ops.ts `combinePicks` on the calling thread: through the kernel when its arrays live in the kernel's memory. */
export function combineOn(simd: SimdCompute | undefined, out: Float32Array, w: Float32Array, pickOut: Float32Array, tokens: number, topK: number, hidden: number): void {
  if (simd && simd.arena.holds(out) && simd.arena.holds(w) && simd.arena.holds(pickOut)) simd.kernel.combineAt(out.byteOffset, w.byteOffset, pickOut.byteOffset, tokens, topK, hidden);
  else combinePicks(out, w, pickOut, tokens, topK, hidden);
}

/** How the kernel reads quantized bank rows (bf16 kept as stored, in its memory), or null: the JS loops. */
export function simdQuantBanks(simd: SimdCompute | undefined, banks: readonly Float32Array[], quant: QuantBanks | undefined): SimdRowLayout | null {
  if (!simd || !quant || !banks.every((b) => simd.arena.holds(b))) return null;
  return simdQuantRows(quant.layout);
}

/** Quantized banks: the views of every row (CpuExpertBanks.quantRows) and their layout (for worker threads). */
export interface QuantBanks {
  readonly rows: readonly (readonly QuantExpert[])[];
  readonly layout: QuantRowLayout;
  readonly rowSize: number;
  readonly hidden: number;
  readonly inter: number;
}

export interface RowCompute {
  /** y = W x for `rows` inputs (see linalg.ts `linear`). */
  linear(y: Float32Array, w: Float32Array, wOff: number, x: Float32Array, rows: number, outDim: number, inDim: number): void;
  /**
   * An MoE layer's router on `tokens` tokens: logits = W x ([tokens][experts], W [experts][hidden]), then moe-ops.ts
   * `routeTokens` into probs, ids and weights (threads split it by tokens when a step has enough of them).
   */
  route(logits: Float32Array, probs: Float32Array, ids: Int32Array, weights: Float32Array, w: Float32Array, x: Float32Array, tokens: number, experts: number, hidden: number, topK: number, normalize: boolean): void;
  /**
   * Qwen3's q, k and v: qkv = W x over the stacked q|k|v rows ([tokens][(heads + 2 kvHeads) d], W [that][hidden]),
   * then attention-ops.ts `qkvPrologue` of each token into q and the layer's cache rows keys / values at its row
   * pages.rowOf[i] (position pos[i]) (threads split it by tokens when a step has enough of them).
   */
  qkv(qkv: Float32Array, w: Float32Array, x: Float32Array, tokens: number, hidden: number, q: Float32Array, keys: Float32Array, values: Float32Array, pages: KvPages, pos: Int32Array, shape: QkvShape): void;
  /** linalg.ts `addNorm` of `tokens` tokens: x += add, xn = rmsnorm(x) (threads split it by tokens in long steps). */
  addNorm(x: Float32Array, add: Float32Array, xn: Float32Array, weight: Float32Array, tokens: number, hidden: number, eps: number): void;
  /** Expert units [0, count) and their picks into `out`, over x [tokens][hidden] (see expert-units.ts). */
  experts(out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, inter: number): void;
  /** out = the picks' outputs combined in router order (moe-ops.ts `combinePicks`; on the calling thread). */
  combine(out: Float32Array, w: Float32Array, pickOut: Float32Array, tokens: number, topK: number, hidden: number): void;
  /**
   * The same over quantized bank rows (quant-linear.ts `computeQuantUnits`, JS on every thread; bf16 rows kept as
   * stored in the kernel's memory through the kernel: wasm/experts.ts `simdQuantRows`, the same sums).
   */
  quantExperts(out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, inter: number): void;
  /**
   * y = W x for `rows` inputs over a bf16 matrix kept as stored (quant-linear.ts `linearQ`): through the kernel
   * (linear_tab_bf16, split by output rows with threads) when W's bits, x and y live in its memory, else linearQ on
   * the calling thread; the same result either way.
   */
  linearBf16(y: Float32Array, w: Bf16Matrix, x: Float32Array, rows: number): void;
  /**
   * Attention of `tokens` tokens (see attention-ops.ts): token i's query at q[i*H*d..), the layer's cache rows
   * keys / values read through its block table (pages), its position pos[i]; output at out[i*H*d..). scores /
   * acc: the calling thread's scratch (maxPositions and d float64s).
   */
  attention(
    out: Float32Array,
    q: Float32Array,
    tokens: number,
    keys: Float32Array,
    values: Float32Array,
    pages: KvPages,
    pos: Int32Array,
    heads: number,
    kvHeads: number,
    d: number,
    scores: Float64Array,
    acc: Float64Array,
  ): void;
  /** A step begins / ends (the thread pool keeps its idle workers polling in between; nothing else changes). */
  beginStep(): void;
  endStep(): void;
  /** Forgets an array that other threads may hold (a step's scratch outgrown). */
  forget(a: Float32Array | Int32Array): void;
  /** Resolves when every worker thread has started. */
  ready(): Promise<void>;
  /** Chunks run by worker threads so far (0 with one thread). */
  workerChunks(): number;
  /** Frees threads (the serial compute has none). */
  dispose(): void;
}

/**
 * One thread: every row on the calling thread. `banks`: the bank pieces (CpuExpertBanks.pieces). `simd`: run
 * ops whose arrays live in its memory through the wasm kernel (bit-identical, wasm/).
 */
export function serialCompute(banks: readonly Float32Array[], inter: number, simd?: SimdCompute, quant?: QuantBanks): RowCompute {
  const act = new Float32Array(2 * inter);
  const lin = simd ? simdLinear(simd.arena, simd.kernel, simd.stage) : linear;
  const quantSimd = simdQuantBanks(simd, banks, quant);
  // Expert units through the kernel over rows laid out as `layout` (float32 by default): x promoted once.
  const simdUnits = (out: Float32Array, units: Int32Array, unitPicks: Int32Array, count: number, x: Float32Array, tokens: number, hidden: number, i: number, layout?: SimdRowLayout): void =>
    computeExpertUnitsSimd(simd!.kernel, simd!.experts[0]!, out, units, unitPicks, 0, count, banks, simd!.stage.promote(x, tokens * hidden), hidden, i, layout);
  return {
    quantExperts: (out, units, unitPicks, count, x, tokens, hidden, i) => {
      if (!quant) throw new ResidencyError('INTERNAL', 'cpu: quantized expert units without quantized banks');
      if (quantSimd && inArena(simd!.arena, out, x, x)) simdUnits(out, units, unitPicks, count, x, tokens, hidden, i, quantSimd);
      else computeQuantUnits(out, units, unitPicks, 0, count, quant.rows, quant.rowSize, x, hidden, i, act);
    },
    linearBf16: (y, w, x, rows) => {
      if (!simd || !inArena(simd.arena, y, w.data, x)) return linearQ(y, w, x, rows);
      const { yTab, xTab } = simd!.stage.linear(y, x, rows, w.rows, w.cols);
      simd!.kernel.linearBf16At(yTab, w.data.byteOffset, xTab, rows, w.cols, 0, w.rows);
    },
    linear: lin,
    addNorm: (x, add, xn, weight, tokens, hidden, eps) => addNorm(x, add, xn, weight, 0, tokens, hidden, eps),
    qkv: (qkv, w, x, tokens, hidden, q, keys, values, pages, pos, shape) => {
      lin(qkv, w, 0, x, tokens, (shape.heads + 2 * shape.kvHeads) * shape.d, hidden);
      for (let i = 0; i < tokens; i++) qkvPrologue(qkv, q, keys, values, i, pos[i]!, pages.rowOf[i]!, shape);
    },
    route: (logits, probs, ids, weights, w, x, tokens, experts, hidden, topK, normalize) => {
      lin(logits, w, 0, x, tokens, experts, hidden);
      routeTokens(logits, probs, ids, weights, 0, tokens, experts, topK, normalize);
    },
    combine: (out, w, pickOut, tokens, topK, hidden) => combineOn(simd, out, w, pickOut, tokens, topK, hidden),
    experts: (out, units, unitPicks, count, x, tokens, hidden, i) => {
      if (simd && inArena(simd.arena, out, x, x)) simdUnits(out, units, unitPicks, count, x, tokens, hidden, i);
      else computeExpertUnits(out, units, unitPicks, 0, count, banks, x, hidden, i, act);
    },
    attention: (out, q, tokens, keys, values, pages, pos, heads, kvHeads, d, scores, acc) => {
      if (simd && simdAttention(simd, out, q, keys, values)) {
        attentionSimd(simd, out, q, tokens, keys, values, pages, pos, heads, kvHeads, d);
        return;
      }
      const w = heads * d;
      for (let i = 0; i < tokens; i++) attention(out, i * w, q, i * w, keys, values, pages.table, pages.tableOf[i]!, pages.blockSize, pos[i]!, heads, kvHeads, d, scores, acc);
    },
    beginStep: () => {},
    endStep: () => {},
    forget: () => {},
    ready: async () => {},
    workerChunks: () => 0,
    dispose: () => {},
  };
}
