// MXFP4 as the gpt-oss hub checkpoints store experts: `*_blocks` uint8 [E, rows, cols/32, 16], two FP4 E2M1
// values a byte (low nibble first), `*_scales` uint8 E8M0 [E, rows, cols/32] (a group of 32 values shares
// 2^(s - 127)). Dequantized exactly into float32 (every value is a small float times a power of two).

import { ResidencyError } from '../../errors.ts';

/** The 16 E2M1 values by code. */
export const FP4_VALUES = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6] as const;

/**
 * Expert `e`'s [rows][cols] matrix from the packed tensors (`cols` a multiple of 32). Row r, column
 * 32g + 2b + h is nibble h (0: low) of byte b of group g, times 2^(scale[r][g] - 127).
 */
export function dequantMxfp4(blocks: Uint8Array, scales: Uint8Array, e: number, rows: number, cols: number): Float32Array {
  const groups = cols / 32;
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      const at = (e * rows + r) * groups + g;
      // E8M0 0xFF is NaN; 2^128 is past float32 (a corrupt checkpoint either way).
      if (scales[at] === 255) throw new ResidencyError('BAD_CHECKPOINT', `MXFP4 scale 0xFF (NaN) at expert ${e} row ${r} group ${g}`);
      const scale = Math.pow(2, scales[at]! - 127);
      const src = at * 16;
      const dst = r * cols + g * 32;
      for (let b = 0; b < 16; b++) {
        const byte = blocks[src + b]!;
        out[dst + 2 * b] = FP4_VALUES[byte & 15]! * scale;
        out[dst + 2 * b + 1] = FP4_VALUES[byte >> 4]! * scale;
      }
    }
  }
  return out;
}
