// Writes safetensors files (and float32 -> bf16/f16 bytes), for tests and tools that build checkpoints.

import { writeFile } from 'node:fs/promises';
import type { DType } from './weights.ts';

export interface TensorToWrite {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Little-endian bytes, product(shape) x dtype size long. */
  readonly bytes: Uint8Array;
}

/**
 * Encodes tensors as one safetensors file, laid out back to back in the given order. The header is
 * padded with spaces to a multiple of 8 bytes, as the reference writer does, so data stays aligned.
 */
export function encodeSafetensors(tensors: readonly TensorToWrite[], metadata?: Record<string, string>): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata) header['__metadata__'] = metadata;
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + t.bytes.length] };
    offset += t.bytes.length;
  }
  return encodeRaw(JSON.stringify(header), tensors.map((t) => t.bytes));
}

/** Low-level: any header text (even invalid, for tests) followed by the given data bytes. */
export function encodeRaw(headerText: string, data: readonly Uint8Array[], pad = true): Uint8Array {
  let json = new TextEncoder().encode(headerText);
  if (pad && json.length % 8 !== 0) {
    const padded = new Uint8Array(json.length + (8 - (json.length % 8))).fill(0x20);
    padded.set(json);
    json = padded;
  }
  const dataLen = data.reduce((s, d) => s + d.length, 0);
  const out = new Uint8Array(8 + json.length + dataLen);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let at = 8 + json.length;
  for (const d of data) {
    out.set(d, at);
    at += d.length;
  }
  return out;
}

export async function writeSafetensors(path: string, tensors: readonly TensorToWrite[], metadata?: Record<string, string>): Promise<void> {
  await writeFile(path, encodeSafetensors(tensors, metadata));
}

/** float32 -> bf16 bytes, rounding to nearest even (NaN stays NaN), as torch's .to(bfloat16). */
export function float32ToBF16Bytes(values: ArrayLike<number>): Uint8Array {
  const f = Float32Array.from(values);
  const bits = new Uint32Array(f.buffer);
  const out = new Uint8Array(f.length * 2);
  for (let i = 0; i < f.length; i++) {
    const x = bits[i]!;
    let h: number;
    if ((x & 0x7fffffff) > 0x7f800000) h = (x >>> 16) | 0x40; // quiet NaN
    else h = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
    out[2 * i] = h & 0xff;
    out[2 * i + 1] = (h >>> 8) & 0xff;
  }
  return out;
}

/** float32 -> little-endian f32 bytes. */
export function float32Bytes(values: ArrayLike<number>): Uint8Array {
  const f = Float32Array.from(values);
  return new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
}
