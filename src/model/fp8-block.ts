// Block-FP8 quantization of a float matrix as fixtures/make/make-checkpoint.py's fp8_block does it (for tests
// and tools that build FP8 checkpoints): per [br][bc] block (trailing blocks partial) a float32 scale
// amax / 448 (at least 1e-12), values float32(v / scale) rounded to the nearest float8_e4m3fn (ties to even),
// and the dequantized values float32(e4m3 x scale) that the reference model is given.
import { FP8_E4M3_MAX, FP8_E4M3_VALUES } from './quant.ts';

/** float8_e4m3fn byte of a finite float (round to nearest, ties to even; beyond 448 saturates, as no input here does). */
export function float32ToE4m3(v: number): number {
  const sign = v < 0 || Object.is(v, -0) ? 0x80 : 0;
  const a = Math.abs(v);
  if (a >= FP8_E4M3_MAX) return sign | 0x7e;
  // The positive codes 0x00..0x7e are increasing: find lo with VALUES[lo] <= a < VALUES[lo + 1].
  let lo = 0;
  let hi = 0x7e;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (FP8_E4M3_VALUES[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const below = a - FP8_E4M3_VALUES[lo]!;
  const above = FP8_E4M3_VALUES[hi]! - a;
  const code = below < above ? lo : above < below ? hi : lo % 2 === 0 ? lo : hi;
  return sign | code;
}

export interface Fp8Block {
  /** [rows][cols] float8_e4m3fn bytes. */
  readonly data: Uint8Array;
  /** [ceil(rows/br)][ceil(cols/bc)] float32 scales (the checkpoint's weight_scale_inv). */
  readonly scales: Float32Array;
  /** [rows][cols] float32(e4m3 x scale): the values the checkpoint defines. */
  readonly dequantized: Float32Array;
}

/** `w` ([rows][cols] float32) in blocks of `block` (make-checkpoint.py's fp8_block, B = 128 there). */
export function fp8Block(w: Float32Array, rows: number, cols: number, block: readonly [number, number] = [128, 128]): Fp8Block {
  const [br, bc] = block;
  const nr = Math.ceil(rows / br);
  const nc = Math.ceil(cols / bc);
  const data = new Uint8Array(rows * cols);
  const scales = new Float32Array(nr * nc);
  const dequantized = new Float32Array(rows * cols);
  for (let i = 0; i < nr; i++) {
    for (let j = 0; j < nc; j++) {
      const [r0, r1, c0, c1] = [i * br, Math.min((i + 1) * br, rows), j * bc, Math.min((j + 1) * bc, cols)];
      let amax = 0;
      for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) amax = Math.max(amax, Math.abs(w[r * cols + c]!));
      const s = Math.max(Math.fround(amax / FP8_E4M3_MAX), Math.fround(1e-12));
      scales[i * nc + j] = s;
      for (let r = r0; r < r1; r++) {
        for (let c = c0; c < c1; c++) {
          const q = float32ToE4m3(Math.fround(w[r * cols + c]! / s));
          data[r * cols + c] = q;
          dequantized[r * cols + c] = FP8_E4M3_VALUES[q]! * s;
        }
      }
    }
  }
  return { data, scales, dequantized };
}
