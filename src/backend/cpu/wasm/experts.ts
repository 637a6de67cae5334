// Expert units through the SIMD kernel (float32 rows, or bf16 kept as stored), each unit's picks as one batch over its row: gate and up rows (contiguous
// in the bank row) as one linear of 2I outputs for every pick, SwiGLU in wasm (swiglu-code.ts, its exp Math.exp's
// steps: exp-code.ts), then down as a linear of H outputs written straight to the picks' output rows. Each sum is
// the kernel's `dot` and each rounding the one moe-ops.ts `swigluExpert` does, so units match `computeExpertUnits`
// bit for bit.
import { MAX_GROUP, PICK, UNIT } from '../expert-units.ts';
import type { QuantRowLayout } from '../expert-rows.ts';
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

/** Where a bank row's gate, up and down weights start (bytes from the row's start), and whether they are bf16. */
export interface SimdRowLayout {
  readonly gate: number;
  readonly up: number;
  readonly down: number;
  readonly bf16: boolean;
}

/** Float32 rows (expert-rows.ts): gate [I][H] | up [I][H] | down [H][I]. */
export const floatRows = (hidden: number, inter: number): SimdRowLayout => ({ gate: 0, up: 4 * inter * hidden, down: 8 * inter * hidden, bf16: false });

/**
 * The kernel's view of quantized bank rows: bf16 kept as stored without biases runs through linear_tab_bf16 (the
 * same sums as quant-linear.ts over the widened rows); other formats (FP8, MXFP4, gpt-oss's biases) have no kernel.
 */
export function simdQuantRows(q: QuantRowLayout): SimdRowLayout | null {
  if (q.bias >= 0 || !q.shapes.every((m) => m.format === 'bf16')) return null;
  return { gate: q.data[0], up: q.data[1], down: q.data[2], bf16: true };
}

/**
 * Units [u0, u1) into `out` ([picks][H]); out, the banks and the scratch live in the kernel's memory, and the
 * units' input rows are float64 from byte address `x64` (stage.ts `promote`); `layout`: where each row's weights lie.
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
  layout: SimdRowLayout = floatRows(hidden, inter),
): void {
  const G = MAX_GROUP;
  const lin = layout.bf16 ? k.linearBf16At : k.linearAt;
  const rowBytes = (layout.bf16 ? 2 : 4) * hidden;
  // Gate and up as one linear of 2I rows when up follows gate; else up's rows [I, 2I) from an origin I rows before it.
  const joined = layout.up === layout.gate + inter * rowBytes;
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
    if (joined) lin(tabsAt + 4 * G, row + layout.gate, tabsAt, count, hidden, 0, twoI);
    else {
      lin(tabsAt + 4 * G, row + layout.gate, tabsAt, count, hidden, 0, inter);
      lin(tabsAt + 4 * G, row + layout.up - inter * rowBytes, tabsAt, count, hidden, inter, twoI);
    }
    k.swigluAt(actAt, guAt, count, inter);
    lin(tabsAt + 12 * G, row + layout.down, tabsAt + 8 * G, count, inter, 0, hidden);
  }
}
