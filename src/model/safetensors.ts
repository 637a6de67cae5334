// Reads one safetensors file: validates its header completely before any tensor byte is trusted.
//
// Layout (https://github.com/huggingface/safetensors): u64 little-endian header length N, N bytes of
// UTF-8 JSON {name: {dtype, shape, data_offsets: [start, end]}, "__metadata__"?: {...}}, then the data
// section; offsets are relative to the start of the data section.

import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { basename } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { DType, RawTensor } from './weights.ts';
import { nestingPastCap } from '../util/json-depth.ts';
import { kindOf } from '../util/regular-file.ts';

/** Bytes per element of each dtype we can load. */
export const DTYPE_SIZE: Readonly<Record<DType, number>> = { BF16: 2, F16: 2, F32: 4, U8: 1, F8_E4M3: 1, I32: 4, I64: 8 };

/** A header larger than this is refused: real checkpoints stay far below it and it bounds the read. */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;

/** A header nesting deeper than this is refused before it is parsed (entries nest 3 levels, metadata 2). */
export const MAX_HEADER_NESTING = 64;

/** One tensor's entry in a validated header; `start`/`end` are offsets into the data section. */
export interface TensorEntry {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly start: number;
  readonly end: number;
}

/** A validated safetensors header: every entry's bytes lie inside the file and no two overlap. */
export interface SafetensorsHeader {
  readonly file: string;
  readonly fileSize: number;
  /** Absolute file offset where the data section begins (8 + header length). */
  readonly dataStart: number;
  readonly tensors: ReadonlyMap<string, TensorEntry>;
  readonly metadata: Readonly<Record<string, unknown>> | null;
}

function bad(file: string, message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', `${basename(file)}: ${message}`);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isDType(v: unknown): v is DType {
  return typeof v === 'string' && Object.hasOwn(DTYPE_SIZE, v);
}

function describe(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/**
 * Validates a parsed header object against the data section size. Pure, so tests and the fuzz loop can
 * drive it without files. `file` only names the file in messages.
 */
export function validateHeader(
  file: string,
  json: unknown,
  dataSize: number,
): { tensors: Map<string, TensorEntry>; metadata: Record<string, unknown> | null } {
  if (!isPlainObject(json)) throw bad(file, `header must be a JSON object, got ${describe(json)}`);
  const tensors = new Map<string, TensorEntry>();
  let metadata: Record<string, unknown> | null = null;
  for (const [name, value] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isPlainObject(value)) throw bad(file, `__metadata__ must be an object, got ${describe(value)}`);
      metadata = value;
      continue;
    }
    const where = `tensor "${name}"`;
    if (name.length === 0) throw bad(file, 'a tensor has an empty name');
    if (!isPlainObject(value)) throw bad(file, `${where}: entry must be an object {dtype, shape, data_offsets}, got ${describe(value)}`);
    const { dtype, shape, data_offsets: offsets } = value;
    if (typeof dtype !== 'string') throw bad(file, `${where}: dtype must be a string, got ${describe(dtype)}`);
    if (!isDType(dtype)) throw bad(file, `${where}: dtype ${dtype} is not supported (expected BF16, F16, F32, U8, F8_E4M3, I32 or I64)`);
    if (!Array.isArray(shape)) throw bad(file, `${where}: shape must be an array of non-negative integers, got ${describe(shape)}`);
    let elements = 1;
    for (const d of shape) {
      if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0) {
        throw bad(file, `${where}: shape must be an array of non-negative integers, got ${describe(shape)}`);
      }
      elements *= d;
      if (!Number.isSafeInteger(elements)) throw bad(file, `${where}: shape ${describe(shape)} has too many elements`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 ||
        !offsets.every((o) => typeof o === 'number' && Number.isSafeInteger(o) && o >= 0)) {
      throw bad(file, `${where}: data_offsets must be [start, end] non-negative integers, got ${describe(offsets)}`);
    }
    const [start, end] = offsets as [number, number];
    if (end < start) throw bad(file, `${where}: data_offsets [${start}, ${end}] end before start`);
    const byteLength = elements * DTYPE_SIZE[dtype];
    if (end - start !== byteLength) {
      throw bad(file, `${where}: size mismatch: shape ${describe(shape)} x ${dtype} is ${byteLength} bytes but data_offsets [${start}, ${end}] span ${end - start}`);
    }
    if (end > dataSize) {
      throw bad(file, `${where}: data_offsets [${start}, ${end}] run past the end of the data section (${dataSize} bytes); the file is truncated or the header is wrong`);
    }
    tensors.set(name, { name, dtype, shape: [...shape] as number[], start, end });
  }
  // Overlap check: sorted by start, each non-empty range must begin at or after the previous one's end.
  const ranges = [...tensors.values()].filter((t) => t.end > t.start).sort((a, b) => a.start - b.start);
  for (let i = 1; i < ranges.length; i++) {
    const prev = ranges[i - 1]!;
    const cur = ranges[i]!;
    if (cur.start < prev.end) {
      throw bad(file, `tensors "${prev.name}" [${prev.start}, ${prev.end}] and "${cur.name}" [${cur.start}, ${cur.end}] overlap`);
    }
  }
  return { tensors, metadata };
}

/** Reads exactly `length` bytes at `position`, or throws naming the file: a short read means truncation. */
async function readExactly(fh: FileHandle, file: string, position: number, length: number): Promise<Uint8Array> {
  const buf = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    let bytesRead: number;
    try {
      ({ bytesRead } = await fh.read(buf, done, length - done, position + done));
    } catch (e) {
      throw bad(file, `read failed at offset ${position + done}: ${(e as Error).message}`);
    }
    if (bytesRead === 0) throw bad(file, `unexpected end of file reading ${length} bytes at offset ${position} (the file is truncated)`);
    done += bytesRead;
  }
  return buf;
}

/** Opens `file`, validates its header and returns it; reads only the header, not the data. */
export async function readHeader(file: string): Promise<SafetensorsHeader> {
  let fh: FileHandle;
  try {
    // Non-blocking: a FIFO put in a shard's place would block the open until a writer came.
    fh = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    throw new ResidencyError('BAD_CHECKPOINT', `cannot open safetensors file ${file}: ${(e as Error).message}`, { cause: e });
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw bad(file, `is ${kindOf(st)}, not a regular file`);
    const fileSize = st.size;
    if (fileSize < 8) throw bad(file, `file is ${fileSize} bytes, too short for the 8-byte header length`);
    const lenBytes = await readExactly(fh, file, 0, 8);
    const headerLen = new DataView(lenBytes.buffer, lenBytes.byteOffset, 8).getBigUint64(0, true);
    if (headerLen < 2n) throw bad(file, `header length ${headerLen} is too small for a JSON object`);
    if (headerLen > BigInt(MAX_HEADER_BYTES)) throw bad(file, `header length ${headerLen} exceeds the ${MAX_HEADER_BYTES}-byte limit (not a safetensors file, or corrupt)`);
    if (headerLen > BigInt(fileSize - 8)) throw bad(file, `header length ${headerLen} exceeds the file size ${fileSize} - 8 (truncated or corrupt)`);
    const n = Number(headerLen);
    const headerBytes = await readExactly(fh, file, 8, n);
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
    } catch {
      throw bad(file, 'header is not valid UTF-8');
    }
    // Checked on the text, before parsing: validating (and describing) a deeply nested value recurses.
    if (nestingPastCap(text, MAX_HEADER_NESTING) >= 0) throw bad(file, `header nests deeper than ${MAX_HEADER_NESTING} levels (a safetensors header nests 3; corrupt or not a safetensors file)`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw bad(file, `header is not valid JSON: ${(e as Error).message}`);
    }
    const dataStart = 8 + n;
    const { tensors, metadata } = validateHeader(file, json, fileSize - dataStart);
    return { file, fileSize, dataStart, tensors, metadata };
  } finally {
    await fh.close();
  }
}

/** Reads are grouped into buffers of at most this many bytes (one tensor larger than it gets its own). */
export const READ_GROUP_BYTES = 256 * 1024 * 1024;

/**
 * Reads the tensors of one validated file. Neighbouring tensors are read together into buffers of at
 * most `groupBytes` (each tensor a view into its group's buffer), so no allocation scales with the shard
 * and a multi-GB shard never needs one multi-GB array. `onBytes` reports each group's data bytes.
 */
export async function readTensors(
  header: SafetensorsHeader,
  onBytes?: (bytes: number) => void,
  groupBytes = READ_GROUP_BYTES,
): Promise<Map<string, RawTensor>> {
  const sorted = [...header.tensors.values()].sort((a, b) => a.start - b.start);
  // Empty tensors may sit inside another's range, so a group's end is the largest end, not the last.
  const groups: { start: number; end: number; tensors: TensorEntry[] }[] = [];
  for (const t of sorted) {
    const g = groups.at(-1);
    if (g && Math.max(g.end, t.end) - g.start <= groupBytes) {
      g.tensors.push(t);
      g.end = Math.max(g.end, t.end);
    } else {
      groups.push({ start: t.start, end: t.end, tensors: [t] });
    }
  }
  const fh = await open(header.file, constants.O_RDONLY | constants.O_NONBLOCK).catch((e: unknown) => {
    throw new ResidencyError('BAD_CHECKPOINT', `cannot open safetensors file ${header.file}: ${(e as Error).message}`, { cause: e });
  });
  const out = new Map<string, RawTensor>();
  try {
    // The size is re-checked because the file may have changed since its header was validated.
    const now = (await fh.stat()).size;
    if (now !== header.fileSize) throw bad(header.file, `file size changed from ${header.fileSize} to ${now} bytes while loading`);
    for (const { start, end, tensors } of groups) {
      const data = await readExactly(fh, header.file, header.dataStart + start, end - start);
      for (const t of tensors) {
        out.set(t.name, { name: t.name, dtype: t.dtype, shape: t.shape, bytes: data.subarray(t.start - start, t.end - start) });
      }
      onBytes?.(end - start);
    }
  } finally {
    await fh.close();
  }
  // Report bytes no tensor covers (padding, gaps) so progress reaches the data section's size.
  const covered = groups.reduce((sum, g) => sum + g.end - g.start, 0);
  const rest = header.fileSize - header.dataStart - covered;
  if (rest > 0) onBytes?.(rest);
  return out;
}
