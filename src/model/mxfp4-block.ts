// MXFP4 packing of a float matrix as make-checkpoint.py's mxfp4_one does it (for tests and tools that build
// gpt-oss checkpoints): per group of 32 values of a row an E8M0 scale 2^e with e = ceil(log2(amax / 6)) (within
// -127..127), each value / 2^e rounded to the nearest E2M1 magnitude (ties to the smaller), its sign kept unless
// it rounds to zero, two codes a byte, low nibble first. `dequantized` holds the values the checkpoint defines.
import { FP4_VALUES } from './quant.ts';

export interface Mxfp4Block {
  /** [rows][cols/32][16] bytes, two E2M1 codes a byte, low nibble first. */
  readonly blocks: Uint8Array;
  /** [rows][cols/32] E8M0 bytes (scale = 2^(byte - 127)). */
  readonly scales: Uint8Array;
  /** [rows][cols] float32: code value x 2^(byte - 127), exact. */
  readonly dequantized: Float32Array;
}

/** The E2M1 code of magnitude index 0..7 nearest |q| (the first of two equally near, as torch's argmin). */
function nearestMagnitude(a: number): number {
  let best = 0;
  for (let c = 1; c < 8; c++) if (Math.abs(a - FP4_VALUES[c]!) < Math.abs(a - FP4_VALUES[best]!)) best = c;
  return best;
}

/** `w` ([rows][cols] float32, cols a multiple of 32) packed as gpt-oss's *_blocks / *_scales. */
export function mxfp4Block(w: Float32Array, rows: number, cols: number): Mxfp4Block {
  if (cols % 32 !== 0) throw new RangeError(`mxfp4Block: cols ${cols} is not a multiple of 32`);
  const groups = cols / 32;
  const blocks = new Uint8Array(rows * groups * 16);
  const scales = new Uint8Array(rows * groups);
  const dequantized = new Float32Array(rows * cols);
  const codes = new Uint8Array(32);
  for (let g = 0; g < rows * groups; g++) {
    const at = g * 32;
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(w[at + j]!));
    const e = Math.min(127, Math.max(-127, Math.ceil(Math.log2(Math.fround(Math.max(amax, 1e-30) / 6)))));
    const step = 2 ** e;
    for (let j = 0; j < 32; j++) {
      const q = w[at + j]! / step;
      const m = nearestMagnitude(Math.abs(q));
      codes[j] = q < 0 && m > 0 ? m + 8 : m;
      dequantized[at + j] = FP4_VALUES[codes[j]!]! * step;
    }
    for (let b = 0; b < 16; b++) blocks[g * 16 + b] = codes[2 * b]! | (codes[2 * b + 1]! << 4);
    scales[g] = e + 127;
  }
  return { blocks, scales, dequantized };
}
