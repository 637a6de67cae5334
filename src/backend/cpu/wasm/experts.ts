// Expert units through the SIMD kernel, each unit's picks as one batch over its row: gate and up rows (contiguous
// in the bank row) as one linear of 2I outputs for every pick, SwiGLU in wasm (swiglu-code.ts, its exp Math.exp's
// steps: exp-code.ts), then down as a linear of H outputs written straight to the picks' output rows. Each sum is
// the kernel's `dot` and each rounding the one moe-ops.ts `swigluExpert` does, so units match `computeExpertUnits`
// bit for bit.
import { MAX_GROUP, PICK, UNIT } from '../expert-units.ts';
import type { WasmArena } from './arena.ts';
import type { SimdKernel } from './kernel.ts';

/**
 * One thread's scratch in the kernel's memory for a unit of up to MAX_GROUP picks: the gate|up sums (float32, as
 * the JS loop rounds them), the activations (float64 rows, the down linear's input) and the kernel's row tables.
 */
export interface ExpertScratch {
  readonly gu: Float32Array; // [MAX_GROUP][2I]
  readonly act: Float64Array; // [MAX_GROUP][I]
  /** Row addresses: inputs | gate|up outputs | activations | outputs, MAX_GROUP each. */
  readonly tabs: Int32Array;
}

export function expertScratch(arena: WasmArena, inter: number): ExpertScratch {
  const G = MAX_GROUP;
  const gu = arena.f32(G * 2 * inter);
  const act = arena.f64(G * inter);
  const tabs = arena.i32(4 * G);
  for (let k = 0; k < G; k++) {
    tabs[G + k] = gu.byteOffset + 4 * k * 2 * inter;
    tabs[2 * G + k] = act.byteOffset + 8 * k * inter;
  }
  return { gu, act, tabs };
}

/**
 * Units [u0, u1) into `out` ([picks][H]); out, the banks and the scratch live in the kernel's memory, and the
 * units' input rows are float64 from byte address `x64` (stage.ts `promote`).
 */
export function computeExpertUnitsSimd(
  k: SimdKernel,
  s: ExpertScratch,
  out: Float32Array,
  units: Int32Array,
  unitPicks: Int32Array,
  u0: number,
  u1: number,
  banks: readonly Float32Array[],
  x64: number,
  hidden: number,
  inter: number,
): void {
  const G = MAX_GROUP;
  const { gu, act, tabs } = s;
  const tabsAt = tabs.byteOffset;
  const outAt = out.byteOffset;
  const actAt = act.byteOffset;
  const guAt = gu.byteOffset;
  const twoI = 2 * inter;
  for (let n = u0; n < u1; n++) {
    const u = n * UNIT;
    const row = banks[units[u]!]!.byteOffset + 4 * units[u + 1]!;
    const first = units[u + 2]!;
    const count = units[u + 3]!;
    for (let j = 0; j < count; j++) {
      tabs[j] = x64 + 8 * unitPicks[(first + j) * PICK + 1]!;
      tabs[3 * G + j] = outAt + 4 * unitPicks[(first + j) * PICK]!;
    }
    k.linearAt(tabsAt + 4 * G, row, tabsAt, count, hidden, 0, twoI);
    k.swigluAt(actAt, guAt, count, inter);
    k.linearAt(tabsAt + 12 * G, row + 4 * twoI * hidden, tabsAt + 8 * G, count, inter, 0, hidden);
  }
}
