// Expert units through the SIMD kernel: per pick, gate and up rows (contiguous in the bank row) as one
// linear of 2I outputs, SwiGLU in JS (Math.exp stays JS: wasm has no exp), then down as a linear of H
// outputs. Each sum is the kernel's `dot` and each rounding the one moe-ops.ts `swigluExpert` does, so
// units match `computeExpertUnits` bit for bit (a pair unit is computed as its two picks one by one).
import { UNIT } from '../expert-units.ts';
import { silu } from '../moe-ops.ts';
import type { SimdKernel } from './kernel.ts';

/**
 * Units [u0, u1) into `out` ([picks][H]); out, x, the banks and `act` (this thread's 2*I floats) all live
 * in the kernel's memory.
 */
export function computeExpertUnitsSimd(
  k: SimdKernel,
  act: Float32Array,
  out: Float32Array,
  units: Int32Array,
  u0: number,
  u1: number,
  banks: readonly Float32Array[],
  x: Float32Array,
  hidden: number,
  inter: number,
): void {
  const actAt = act.byteOffset;
  const outAt = out.byteOffset;
  const xAt = x.byteOffset;
  const twoI = 2 * inter;
  for (let n = u0; n < u1; n++) {
    const u = n * UNIT;
    const row = banks[units[u]!]!.byteOffset + 4 * units[u + 1]!;
    const down = row + 4 * twoI * hidden;
    for (let p = 0; p < 2; p++) {
      const o = units[u + 2 + p]!;
      if (o < 0) break;
      k.rowsAt(actAt, row, xAt + 4 * units[u + 4 + p]!, 1, twoI, hidden, 0, twoI);
      for (let j = 0; j < inter; j++) act[j] = silu(act[j]!) * act[inter + j]!;
      k.rowsAt(outAt + 4 * o, down, actAt, 1, hidden, inter, 0, hidden);
    }
  }
}
