// Tensors read on demand, one at a time, into memory the caller owns: what loading at size needs (the CUDA
// backend streams each tensor from its shard into pinned staging and on to the device, so the host never
// holds the checkpoint). A map of in-memory tensors is a source too (tests, converted checkpoints).
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { CheckpointLayout } from './checkpoint.ts';
import type { RawTensor } from './weights.ts';

export interface TensorInfo {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  /** Stored bytes. */
  readonly bytes: number;
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

function checkRange(t: TensorInfo, offset: number, n: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset + n > t.bytes) {
    throw new ResidencyError('INTERNAL', `read of ${n} bytes at ${offset} is outside tensor ${t.name} (${t.bytes} bytes)`);
  }
}

/** The tensors of a validated checkpoint layout, read from the shard files with positioned reads. */
export function fileTensorSource(layout: CheckpointLayout): TensorSource {
  const fds = new Map<string, number>();
  const fdOf = (file: string, size: number): number => {
    let fd = fds.get(file);
    if (fd === undefined) {
      try {
        fd = openSync(file, 'r');
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
    return { name, dtype: t.entry.dtype, shape: t.entry.shape, bytes: t.entry.end - t.entry.start };
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

/** In-memory tensors as a source. */
export function mapTensorSource(raw: ReadonlyMap<string, RawTensor>): TensorSource {
  const info = (name: string): TensorInfo => {
    const t = raw.get(name);
    if (!t) throw missing(name);
    return { name, dtype: t.dtype, shape: t.shape, bytes: t.bytes.byteLength };
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
