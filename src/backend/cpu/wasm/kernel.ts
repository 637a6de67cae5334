// The SIMD linear kernel over a shared wasm memory, and the dispatch that uses it only when every array
// of an op lives in that memory (anything else takes the JS path, with the same result bit for bit).
import { setFlagsFromString } from 'node:v8';
import { ResidencyError } from '../../../errors.ts';
import { linear } from '../linalg.ts';
import type { WasmArena } from './arena.ts';
import { linearModuleBytes } from './module.ts';
import { wasmApi, type WasmMemory } from './api.ts';
import type { TabStage } from './stage.ts';

/** linalg.ts `linearRows` and the attention sums over byte addresses in the kernel's memory. */
export interface SimdKernel {
  /**
   * tile-code.ts `linear_tab` (`linear_tab1` when rows is 1): for r < rows, o in [o0, o1): f32 at (yTab[r] + 4o) = dot(weight row o at w, the
   * float64 row at xTab[r], inDim); yTab and xTab address i32 tables of byte addresses (stage.ts fills them).
   * Output rows go in blocks whose weights fit L2, so every input tile reuses a block from cache.
   */
  linearAt(yTab: number, w: number, xTab: number, rows: number, inDim: number, o0: number, o1: number): void;
  /**
   * The same over bf16 weight rows (2 bytes a value at `w`, as stored: quant.ts Bf16Matrix), each widened exactly to
   * its float32: bit-identical to linearAt over the widened rows (quant-dot.ts `dotBf16`).
   */
  linearBf16At(yTab: number, w: number, xTab: number, rows: number, inDim: number, o0: number, o1: number): void;
  /** moe-ops.ts `combinePicks` over byte addresses (combine-code.ts). */
  combineAt(out: number, w: number, pickOut: number, tokens: number, topK: number, hidden: number): void;
  /** swiglu-code.ts `swiglu`: the float64 activations of `count` picks' gate|up float32 sums (8*inter bytes a row each). */
  swigluAt(act: number, gu: number, count: number, inter: number): void;
  /** exp-code.ts: Math.exp's steps in wasm (for tests). */
  exp(x: number): number;
  /** out[p] (float64) = dot(q, k + p*kStride, d) for p < count (attention-code.ts). */
  scoresAt(out: number, q: number, k: number, kStride: number, d: number, count: number): void;
  /** acc[i] (float64) += e[p] * v[p*vStride + i] for p < count in order (attention-code.ts). */
  wsumAt(acc: number, e: number, v: number, vStride: number, d: number, count: number): void;
}

/** Weight bytes of one block of linear_tab's output rows (L2 is 512 KiB a core here; inputs and outputs need room). */
const BLOCK_BYTES = 128 * 1024;

/** The compiled module of each variant (plain, fused), per thread. */
const compiled: (object | null)[] = [null, null];
let fmaChoice: boolean | null = null;
let calls = 0;
let bf16Calls = 0;

/**
 * Whether the kernels add their exact products with relaxed_madd (one fused multiply-add instead of a multiply and
 * an add: the same sums, asm.ts exactMulAdd). On where the runtime has relaxed SIMD: Node 22 and later; Node 20 has
 * it behind V8's --experimental-wasm-relaxed-simd, which this sets once (it only lets more modules validate).
 * RESIDENCY_CPU_FMA=0: the multiply and add.
 */
export function simdFma(): boolean {
  if (fmaChoice !== null) return fmaChoice;
  if (process.env.RESIDENCY_CPU_FMA?.trim() === '0' || !wasmApi) return (fmaChoice = false);
  const bytes = linearModuleBytes(true);
  let ok = wasmApi.validate(bytes);
  if (!ok) {
    try {
      setFlagsFromString('--experimental-wasm-relaxed-simd');
      ok = wasmApi.validate(bytes);
    } catch {
      ok = false;
    }
  }
  return (fmaChoice = ok);
}

/** Kernel calls on this thread so far (a probe for tests: the SIMD path really ran). */
export function simdKernelCalls(): number {
  return calls;
}

/** Calls of the bf16 linear (linearBf16At) on this thread so far (a probe for tests: bf16 rows ran in the kernel). */
export function simdBf16Calls(): number {
  return bf16Calls;
}

/** Whether this runtime runs the kernel (WebAssembly SIMD and shared memory). */
export function simdAvailable(): boolean {
  try {
    return wasmApi !== undefined && wasmApi.validate(linearModuleBytes());
  } catch {
    return false;
  }
}

/**
 * An instance of the kernel over `memory` (each thread makes its own over the same shared memory); `fma`: the fused
 * variant (default: simdFma()), the same results.
 */
export function simdKernel(memory: WasmMemory, fma = simdFma()): SimdKernel {
  if (fma && !simdFma()) throw new ResidencyError('NOT_AVAILABLE', 'cpu simd: this runtime lacks relaxed SIMD (the fused kernel)');
  const v = fma ? 1 : 0;
  if (compiled[v] === null) {
    if (!wasmApi || !simdAvailable()) throw new ResidencyError('NOT_AVAILABLE', 'cpu simd: this runtime lacks WebAssembly SIMD');
    compiled[v] = new wasmApi.Module(linearModuleBytes(fma));
  }
  const inst = new wasmApi!.Instance(compiled[v]!, { env: { memory } });
  const tab = inst.exports.linear_tab as (...a: number[]) => void;
  const tab1 = inst.exports.linear_tab1 as (...a: number[]) => void;
  const tabBf16 = inst.exports.linear_tab_bf16 as (...a: number[]) => void;
  const tab1Bf16 = inst.exports.linear_tab1_bf16 as (...a: number[]) => void;
  const scores = inst.exports.attn_scores as (...a: number[]) => void;
  const wsum = inst.exports.attn_wsum as (...a: number[]) => void;
  const combine = inst.exports.combine as (...a: number[]) => void;
  const swiglu = inst.exports.swiglu as (...a: number[]) => void;
  return {
    linearAt: (yTab, w, xTab, rows, inDim, o0, o1) => {
      calls++;
      const step = Math.max(1, Math.floor(BLOCK_BYTES / (4 * inDim)));
      const f = rows === 1 ? tab1 : tab;
      for (let o = o0; o < o1; o += step) f(yTab, w, xTab, rows, inDim, o, Math.min(o1, o + step));
    },
    linearBf16At: (yTab, w, xTab, rows, inDim, o0, o1) => {
      calls++;
      bf16Calls++;
      const step = Math.max(1, Math.floor(BLOCK_BYTES / (2 * inDim)));
      const f = rows === 1 ? tab1Bf16 : tabBf16;
      for (let o = o0; o < o1; o += step) f(yTab, w, xTab, rows, inDim, o, Math.min(o1, o + step));
    },
    scoresAt: (out, q, k, kStride, d, count) => {
      calls++;
      scores(out, q, k, kStride, d, count);
    },
    wsumAt: (acc, e, v, vStride, d, count) => wsum(acc, e, v, vStride, d, count),
    combineAt: (out, w, pickOut, tokens, topK, hidden) => {
      calls++;
      combine(out, w, pickOut, tokens, topK, hidden);
    },
    swigluAt: (act, gu, count, inter) => swiglu(act, gu, count, inter),
    exp: inst.exports.exp as (x: number) => number,
  };
}

/** Whether y, w and x all live in `arena` (the kernel can address them). */
export function inArena(arena: WasmArena, y: Float32Array, w: Float32Array | Uint16Array, x: Float32Array): boolean {
  return arena.holds(y) && arena.holds(w) && arena.holds(x);
}

/** linalg.ts `linear` through the kernel when its arrays live in `arena` (inputs staged by `stage`), else the JS loop. */
export function simdLinear(arena: WasmArena, k: SimdKernel, stage: TabStage) {
  return (y: Float32Array, w: Float32Array, wOff: number, x: Float32Array, rows: number, outDim: number, inDim: number): void => {
    if (!inArena(arena, y, w, x)) return linear(y, w, wOff, x, rows, outDim, inDim);
    const { yTab, xTab } = stage.linear(y, x, rows, outDim, inDim);
    k.linearAt(yTab, w.byteOffset + 4 * wOff, xTab, rows, inDim, 0, outDim);
  };
}
