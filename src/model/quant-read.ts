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

/**
 * The index of the first E8M0 byte over MXFP4_MAX_SCALE in `bytes`, or -1. Four bytes a step where they are
 * aligned (a byte b = 128h + l is over 252 when h = 1 and l + 3 >= 128: no carry leaves a byte), so a real
 * expert's scales are checked without a findIndex's per-byte call (docs/results.md, "Sampling, loading, server").
 */
export function firstBadE8m0(bytes: Uint8Array): number {
  const scan = (from: number, to: number): number => {
    for (let i = from; i < to; i++) if (bytes[i]! > MXFP4_MAX_SCALE) return i;
    return -1;
  };
  const head = Math.min(bytes.length, (4 - (bytes.byteOffset & 3)) & 3);
  const h = scan(0, head);
  if (h >= 0) return h;
  const words = (bytes.length - head) >> 2;
  const w = new Uint32Array(bytes.buffer, bytes.byteOffset + head, words);
  for (let i = 0; i < words; i++) {
    const v = w[i]!;
    if ((((v & 0x7f7f7f7f) + 0x03030303) & v & 0x80808080) !== 0) return scan(head + 4 * i, head + 4 * i + 4);
  }
  return scan(head + 4 * words, bytes.length);
}

/** What an E8M0 byte over the bound means, for messages. */
export function badE8m0(b: number): string {
  return b === 255 ? '0xFF (E8M0 NaN)' : `${b} (2^${b - 127} x 6 overflows float32)`;
}

function corrupt(message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${message}; the checkpoint is corrupt (download or convert it again)`);
}

/** A validated block-FP8 matrix from its weight ([rows][cols] F8_E4M3) and scale tensors (shapes checked by quant-check.ts). */
export function fp8Matrix(w: RawTensor, s: RawTensor, block: readonly [number, number]): Fp8Matrix {
  const [rows, cols] = w.shape as [number, number];
  const data = w.bytes.slice(); // its own bytes: the shard buffers can be let go
  checkFp8Data(w.name, rows, cols, data);
  const scales = fp8Scales(s, cols, block);
  return { format: 'fp8', rows, cols, data, scales, block: [block[0], block[1]] };
}

/** Refuses a NaN byte (0x7F / 0xFF) among the F8_E4M3 values `data` of tensor `name` ([rows][cols]). */
export function checkFp8Data(name: string, rows: number, cols: number, data: Uint8Array): void {
  for (let i = 0; i < data.length; i++) {
    if ((data[i]! & 0x7f) === 0x7f) throw corrupt(`tensor "${name}": element ${i} of ${rows}x${cols} is NaN (float8_e4m3fn byte 0x${data[i]!.toString(16)})`);
  }
}

/**
 * The validated float32 block scales of a [rows][cols] FP8 weight from its scale tensor (F32 or BF16), in a
 * fresh array or `into` (memory the caller owns, of the scale count: a bank row).
 */
export function fp8Scales(s: RawTensor, cols: number, block: readonly [number, number], into?: Float32Array): Float32Array {
  const scales = tensorToFloat32(s, { finite: true, ...(into ? { into } : {}) });
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
  const i = firstBadE8m0(s);
  if (i >= 0) throw corrupt(`tensor "${scales.name}": MXFP4 scale ${badE8m0(s[i]!)} at expert ${e} row ${Math.floor(i / g)} group ${i % g}, expected at most ${MXFP4_MAX_SCALE}`);
  return { format: 'mxfp4', rows, cols, data: blocks.bytes.slice(e * rows * g * 16, (e + 1) * rows * g * 16), scales: s, block: [1, 32] };
}
