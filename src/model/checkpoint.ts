// Finds a checkpoint's safetensors shards (single file or index.json), validates every header and the
// index against them, then reads the tensors shard by shard.

import type { Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { kindOf, readRegularFile } from '../util/regular-file.ts';
import { readHeader, readTensors } from './safetensors.ts';
import type { SafetensorsHeader, TensorEntry } from './safetensors.ts';
import type { RawTensor } from './weights.ts';

export const INDEX_FILE = 'model.safetensors.index.json';
export const SINGLE_FILE = 'model.safetensors';

/** A checkpoint whose headers are validated; no tensor data has been read yet. */
export interface CheckpointLayout {
  readonly dir: string;
  readonly shards: readonly SafetensorsHeader[];
  /** Every tensor of every shard, by name, with the shard that holds it. */
  readonly tensors: ReadonlyMap<string, { readonly shard: SafetensorsHeader; readonly entry: TensorEntry }>;
  /** Sum of all shards' data sections: what reading the checkpoint costs. */
  readonly dataBytes: number;
}

function bad(message: string): ResidencyError {
  return new ResidencyError('BAD_CHECKPOINT', message);
}

/** What is at `path`: a regular file, nothing, or something else (a folder, a FIFO: named in messages). */
async function entryAt(path: string): Promise<'file' | 'none' | Stats> {
  try {
    const st = await stat(path);
    return st.isFile() ? 'file' : st;
  } catch {
    return 'none';
  }
}

/** Parses index.json into tensor -> shard file name, refusing names that would leave the folder. */
export function parseIndex(text: string): Map<string, string> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw bad(`${INDEX_FILE}: not valid JSON: ${(e as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw bad(`${INDEX_FILE}: must be a JSON object`);
  const map = (json as Record<string, unknown>)['weight_map'];
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    throw bad(`${INDEX_FILE}: weight_map must be an object {tensor name: shard file}`);
  }
  const out = new Map<string, string>();
  for (const [name, shard] of Object.entries(map)) {
    if (typeof shard !== 'string' || shard.length === 0) {
      throw bad(`${INDEX_FILE}: weight_map["${name}"] must be a shard file name, got ${JSON.stringify(shard)}`);
    }
    // Shards live next to the index; a path here is either corrupt or hostile.
    if (shard.includes('/') || shard.includes('\\') || shard === '.' || shard === '..') {
      throw bad(`${INDEX_FILE}: weight_map["${name}"] = "${shard}" must be a plain file name in the checkpoint folder`);
    }
    out.set(name, shard);
  }
  if (out.size === 0) throw bad(`${INDEX_FILE}: weight_map is empty`);
  return out;
}

/** Locates and validates every shard header of the checkpoint in `dir`. */
export async function openCheckpoint(dir: string): Promise<CheckpointLayout> {
  const indexPath = join(dir, INDEX_FILE);
  let shardFiles: string[];
  let weightMap: Map<string, string> | null = null;
  const index = await entryAt(indexPath);
  const single = await entryAt(join(dir, SINGLE_FILE));
  if (index !== 'none') {
    if (index !== 'file') throw bad(`${INDEX_FILE} in ${dir} is ${kindOf(index)}, not a regular file`);
    let text: string;
    try {
      text = await readRegularFile(indexPath);
    } catch (e) {
      throw bad(`cannot read ${indexPath}: ${(e as Error).message}`);
    }
    weightMap = parseIndex(text);
    shardFiles = [...new Set(weightMap.values())].sort();
    for (const f of shardFiles) {
      const at = await entryAt(join(dir, f));
      if (at === 'file') continue;
      const user = [...weightMap].find(([, s]) => s === f)![0];
      throw bad(`${INDEX_FILE}: shard ${f} (named for tensor "${user}") ${at === 'none' ? `does not exist in ${dir}` : `is ${kindOf(at)}, not a regular file`}`);
    }
  } else if (single !== 'none') {
    if (single !== 'file') throw bad(`${SINGLE_FILE} in ${dir} is ${kindOf(single)}, not a regular file`);
    shardFiles = [SINGLE_FILE];
  } else {
    throw bad(`no ${SINGLE_FILE} or ${INDEX_FILE} in ${dir}: not a safetensors checkpoint folder`);
  }

  const shards: SafetensorsHeader[] = [];
  const tensors = new Map<string, { shard: SafetensorsHeader; entry: TensorEntry }>();
  let dataBytes = 0;
  for (const f of shardFiles) {
    const header = await readHeader(join(dir, f));
    shards.push(header);
    dataBytes += header.fileSize - header.dataStart;
    for (const entry of header.tensors.values()) {
      const prev = tensors.get(entry.name);
      if (prev) throw bad(`tensor "${entry.name}" appears in both ${shardName(prev.shard)} and ${f}`);
      tensors.set(entry.name, { shard: header, entry });
    }
  }
  if (weightMap) {
    for (const [name, f] of weightMap) {
      const found = tensors.get(name);
      if (!found || shardName(found.shard) !== f) {
        throw bad(`${INDEX_FILE}: tensor "${name}" is mapped to ${f} but ${f} does not contain it`);
      }
    }
  }
  return { dir, shards, tensors, dataBytes };
}

function shardName(h: SafetensorsHeader): string {
  return h.file.split(/[\\/]/).pop()!;
}

/**
 * Reads every tensor, one shard at a time (so a caller converting as it goes never holds more than one
 * raw shard beyond what it keeps). `onBytes(bytes, shard)` reports progress in data bytes.
 */
export async function readCheckpoint(
  layout: CheckpointLayout,
  onBytes?: (bytes: number, shard: string) => void,
): Promise<Map<string, RawTensor>> {
  const out = new Map<string, RawTensor>();
  for (const shard of layout.shards) {
    const name = shardName(shard);
    const tensors = await readTensors(shard, (n) => onBytes?.(n, name));
    for (const [k, v] of tensors) out.set(k, v);
  }
  return out;
}
