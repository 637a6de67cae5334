// Tensors read on demand, one at a time, into memory the caller owns: what loading at size needs (the CUDA
// backend streams each tensor from its shard into pinned staging and on to the device, so the host never
// holds the checkpoint). A map of in-memory tensors is a source too (tests, converted checkpoints).
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { CheckpointLayout } from './checkpoint.ts';
import type { RawTensor } from './weights.ts';
import type { QuantSpec } from './quant-config.ts';
import { fp8ScaleName } from './quant-read.ts';
import { checkBf16Finite } from './float-convert.ts';

export interface TensorInfo {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  /** Stored bytes. */
  readonly bytes: number;
  /**
   * Present on a quantized weight's data tensor (block-FP8 values, MXFP4 blocks): how to read its values
   * from the stored bytes, so a backend can upload them as stored. Absent on float tensors (bf16 as before)
   * and on scale tensors (read as plain F32 / BF16 / U8 tensors).
   */
  readonly quant?: QuantInfo;
}

/** How a quantized weight is stored: its data tensor (this one), its scale tensor, the block shape. */
export interface QuantInfo {
  readonly format: 'fp8' | 'mxfp4';
  /** Experts stacked in the tensor ([E] leading both data and scales; 1 for a plain FP8 weight). */
  readonly matrices: number;
  /** Each matrix's values: [rows][cols]. */
  readonly rows: number;
  readonly cols: number;
  /**
   * fp8: float8_e4m3fn bytes [rows][cols]; mxfp4: [E][rows][cols/32][16] bytes, two E2M1 values a byte,
   * low nibble first.
   */
  readonly data: string;
  /** fp8: float32 (or bf16) [ceil(rows/br)][ceil(cols/bc)]; mxfp4: E8M0 bytes [E][rows][cols/32], 2^(s - 127). */
  readonly scales: string;
  /** Values sharing one scale, [br, bc]: config.json's weight_block_size for fp8, [1, 32] for mxfp4. */
  readonly block: readonly [number, number];
}

/** The QuantInfo of tensor `name` under `q` (the spec's quantization), if it is a quantized weight's data. */
export function quantInfoOf(q: QuantSpec | undefined, name: string, dtype: string, shape: readonly number[], has: (n: string) => boolean): QuantInfo | undefined {
  if (q?.method === 'fp8' && dtype === 'F8_E4M3' && shape.length === 2) {
    return { format: 'fp8', matrices: 1, rows: shape[0]!, cols: shape[1]!, data: name, scales: fp8ScaleName(name), block: q.blockSize };
  }
  if (q?.method === 'mxfp4' && dtype === 'U8' && name.endsWith('_blocks') && shape.length === 4) {
    const scales = `${name.slice(0, -'_blocks'.length)}_scales`;
    if (has(scales)) return { format: 'mxfp4', matrices: shape[0]!, rows: shape[1]!, cols: shape[2]! * 32, data: name, scales, block: [1, 32] };
  }
  return undefined;
}

export interface TensorSource {
  /** Every tensor's name. */
  names(): Iterable<string>;
  has(name: string): boolean;
  /** The tensor's dtype, shape and size; BAD_CHECKPOINT naming it when it is missing. */
  info(name: string): TensorInfo;
  /** Copies `into.byteLength` stored bytes of `name`, starting `offset` bytes into it, into `into`. */
  read(name: string, into: Uint8Array, offset?: number): void;
  /** The sum of every tensor's bytes. */
  readonly totalBytes: number;
  /** Releases open files (idempotent). */
  close(): void;
}

function missing(name: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `tensor ${name} is missing`);
}

/** Reads BF16 tensor `name` (its info `t`) into `bits` as stored, refusing a NaN or infinity naming it. */
export function readBf16Checked(source: TensorSource, t: TensorInfo, bits: Uint16Array): void {
  source.read(t.name, new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength));
  checkBf16Finite(t, bits);
}

function checkRange(t: TensorInfo, offset: number, n: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset + n > t.bytes) {
    throw new ResidencyError('INTERNAL', `read of ${n} bytes at ${offset} is outside tensor ${t.name} (${t.bytes} bytes)`);
  }
}

/**
 * The tensors of a validated checkpoint layout, read from the shard files with positioned reads; `quant`
 * (the spec's quantization) describes its quantized weights.
 */
export function fileTensorSource(layout: CheckpointLayout, quant?: QuantSpec): TensorSource {
  const fds = new Map<string, number>();
  const fdOf = (file: string, size: number): number => {
    let fd = fds.get(file);
    if (fd === undefined) {
      try {
        fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK); // a FIFO swapped in since: no hang, the size check refuses it
      } catch (e) {
        throw new ResidencyError('BAD_CHECKPOINT', `cannot open safetensors file ${file}: ${(e as Error).message}`, { cause: e });
      }
      const now = fstatSync(fd).size;
      if (now !== size) {
        closeSync(fd);
        throw new ResidencyError('BAD_CHECKPOINT', `${basename(file)}: file size changed from ${size} to ${now} bytes while loading`);
      }
      fds.set(file, fd);
    }
    return fd;
  };
  const info = (name: string): TensorInfo => {
    const t = layout.tensors.get(name);
    if (!t) throw missing(name);
    const q = quantInfoOf(quant, name, t.entry.dtype, t.entry.shape, (n) => layout.tensors.has(n));
    return { name, dtype: t.entry.dtype, shape: t.entry.shape, bytes: t.entry.end - t.entry.start, ...(q ? { quant: q } : {}) };
  };
  let total = 0;
  for (const t of layout.tensors.values()) total += t.entry.end - t.entry.start;
  return {
    names: () => layout.tensors.keys(),
    has: (name) => layout.tensors.has(name),
    info,
    read(name, into, offset = 0) {
      const ti = info(name);
      checkRange(ti, offset, into.byteLength);
      const t = layout.tensors.get(name)!;
      const fd = fdOf(t.shard.file, t.shard.fileSize);
      let done = 0;
      const at = t.shard.dataStart + t.entry.start + offset;
      while (done < into.byteLength) {
        const n = readSync(fd, into, done, into.byteLength - done, at + done);
        if (n <= 0) throw new ResidencyError('BAD_CHECKPOINT', `${basename(t.shard.file)}: unexpected end of file reading tensor ${name}`);
        done += n;
      }
    },
    totalBytes: total,
    close() {
      for (const fd of fds.values()) closeSync(fd);
      fds.clear();
    },
  };
}

/** In-memory tensors as a source (`quant` as for fileTensorSource). */
export function mapTensorSource(raw: ReadonlyMap<string, RawTensor>, quant?: QuantSpec): TensorSource {
  const info = (name: string): TensorInfo => {
    const t = raw.get(name);
    if (!t) throw missing(name);
    const q = quantInfoOf(quant, name, t.dtype, t.shape, (n) => raw.has(n));
    return { name, dtype: t.dtype, shape: t.shape, bytes: t.bytes.byteLength, ...(q ? { quant: q } : {}) };
  };
  let total = 0;
  for (const t of raw.values()) total += t.bytes.byteLength;
  return {
    names: () => raw.keys(),
    has: (name) => raw.has(name),
    info,
    read(name, into, offset = 0) {
      const ti = info(name);
      checkRange(ti, offset, into.byteLength);
      into.set(raw.get(name)!.bytes.subarray(offset, offset + into.byteLength));
    },
    totalBytes: total,
    close() {},
  };
}

/**
 * The tensors of `source` as a map whose get() reads the tensor into fresh bytes of its own (every call;
 * nothing is cached), so a loader converting tensor by tensor holds one stored tensor at a time beside what
 * it keeps, never the checkpoint. Iterating values or entries reads every tensor.
 */
export function readOnGet(source: TensorSource): ReadonlyMap<string, RawTensor> {
  const get = (name: string): RawTensor | undefined => {
    if (!source.has(name)) return undefined;
    const t = source.info(name);
    const bytes = new Uint8Array(t.bytes);
    source.read(name, bytes);
    return { name, dtype: t.dtype as RawTensor['dtype'], shape: t.shape, bytes };
  };
  function* entries(): IterableIterator<[string, RawTensor]> {
    for (const name of source.names()) yield [name, get(name)!];
  }
  function* values(): IterableIterator<RawTensor> {
    for (const [, t] of entries()) yield t;
  }
  let size = 0;
  for (const _ of source.names()) size++;
  return {
    get,
    has: (name) => source.has(name),
    get size() {
      return size;
    },
    keys: () => source.names()[Symbol.iterator]() as MapIterator<string>,
    values: values as () => MapIterator<RawTensor>,
    entries: entries as () => MapIterator<[string, RawTensor]>,
    [Symbol.iterator]: entries as () => MapIterator<[string, RawTensor]>,
    forEach(f, thisArg) {
      for (const [k, v] of entries()) f.call(thisArg, v, k, this);
    },
  };
}
