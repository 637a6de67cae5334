// Quantized matrices from a checkpoint's raw tensors, their values checked as they are copied out of the
// shard buffers (a NaN byte, a scale that is not finite or would overflow float32: BAD_CHECKPOINT naming
// the tensor and the element), so a corrupt checkpoint is refused before any weight is used.
import { ResidencyError } from '../errors.ts';
import { tensorToFloat32 } from './float-convert.ts';
import { FP8_E4M3_MAX, type Fp8Matrix, type Mxfp4Matrix } from './quant.ts';
import type { RawTensor } from './weights.ts';

/** The FP8 scales of a weight tensor (`X.weight` -> `X.weight_scale_inv`). */
export function fp8ScaleName(weight: string): string {
  return `${weight}_scale_inv`;
}

/** Largest E8M0 byte whose 2^(s - 127) keeps 6 (the largest E2M1 value) finite in float32; 0xFF is NaN. */
export const MXFP4_MAX_SCALE = 252;

const FLOAT32_MAX = 3.4028234663852886e38;

function corrupt(message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${message}; the checkpoint is corrupt (download or convert it again)`);
}

/** A validated block-FP8 matrix from its weight ([rows][cols] F8_E4M3) and scale tensors (shapes checked by quant-check.ts). */
export function fp8Matrix(w: RawTensor, s: RawTensor, block: readonly [number, number]): Fp8Matrix {
  const [rows, cols] = w.shape as [number, number];
  const data = w.bytes.slice(); // its own bytes: the shard buffers can be let go
  for (let i = 0; i < data.length; i++) {
    if ((data[i]! & 0x7f) === 0x7f) throw corrupt(`tensor "${w.name}": element ${i} of ${rows}x${cols} is NaN (float8_e4m3fn byte 0x${data[i]!.toString(16)})`);
  }
  const scales = fp8Scales(s, cols, block);
  return { format: 'fp8', rows, cols, data, scales, block: [block[0], block[1]] };
}

/** The validated float32 block scales of a [rows][cols] FP8 weight from its scale tensor (F32 or BF16). */
export function fp8Scales(s: RawTensor, cols: number, block: readonly [number, number]): Float32Array {
  const scales = tensorToFloat32(s, { finite: true });
  const bc = Math.ceil(cols / block[1]);
  for (let j = 0; j < scales.length; j++) {
    const v = scales[j]!;
    if (!(v >= 0) || v * FP8_E4M3_MAX > FLOAT32_MAX) {
      throw corrupt(`tensor "${s.name}": the scale of block [${Math.floor(j / bc)}, ${j % bc}] is ${v}, expected a non-negative scale of at most ${FLOAT32_MAX / FP8_E4M3_MAX} (448 x scale must stay finite in float32)`);
    }
  }
  return scales;
}

/**
 * Expert `e`'s validated [rows][cols] MXFP4 matrix from a layer's `*_blocks` [E][rows][cols/32][16] and
 * `*_scales` [E][rows][cols/32] (U8, shapes checked by the tensor map).
 */
export function mxfp4Matrix(blocks: RawTensor, scales: RawTensor, e: number, rows: number, cols: number): Mxfp4Matrix {
  const g = cols / 32;
  const s = scales.bytes.slice(e * rows * g, (e + 1) * rows * g);
  for (let i = 0; i < s.length; i++) {
    if (s[i]! > MXFP4_MAX_SCALE) {
      const what = s[i] === 255 ? '0xFF (E8M0 NaN)' : `${s[i]} (2^${s[i]! - 127} x 6 overflows float32)`;
      throw corrupt(`tensor "${scales.name}": MXFP4 scale ${what} at expert ${e} row ${Math.floor(i / g)} group ${i % g}, expected at most ${MXFP4_MAX_SCALE}`);
    }
  }
  return { format: 'mxfp4', rows, cols, data: blocks.bytes.slice(e * rows * g * 16, (e + 1) * rows * g * 16), scales: s, block: [1, 32] };
}
