// DIR/map.json: the map the banks hold, kept across restarts. Written whole through a fresh temporary file
// (fsynced, renamed over the old one, the folder fsynced), so a crash at any point leaves the old map or the
// new one, both whole; a full disk leaves the old one. It carries the run's boot map and the counts the
// controller had when it was written (the counts the map came from).
import { closeSync, constants, lstatSync, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { open, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { parseCountsDump, type CountsDump } from './counts.ts';
import { FOLDER_FILES } from './folder-files.ts';
import { openToRead, replaceFileSync } from './folder-io.ts';
import { parseRowMap, sameGeometry, type RowMap } from './rowmap.ts';
import { planRestore } from './restore.ts';
import { replaySwapLog } from './swap-log.ts';

/** Where the map came from when its run started. */
export type MapSource = 'resumed' | '--map' | 'default';

/** map.json, version 1. */
export interface MapRecord {
  readonly v: 1;
  readonly type: 'residency_map';
  /** The run that wrote it (telemetry's boot records name the same id), when, and at which step. */
  readonly run: string;
  readonly time: string;
  readonly step: number;
  /** How the run that wrote it started: from the map.json before it, from --map, or from the default map. */
  readonly source: MapSource;
  /** Swaps landed in that run up to this map. */
  readonly swaps_applied: number;
  /** The map the banks hold. */
  readonly map: RowMap;
  /** The map that run started from. */
  readonly boot_map: RowMap;
  /** The controller's counts when this map was written. */
  readonly counts: CountsDump;
}

export const mapPath = (dir: string): string => join(dir, FOLDER_FILES.map);

/**
 * The record in `path`, checked (its maps and counts named when wrong), or null when there is none. Read
 * without following a link at the name and without blocking on a FIFO; anything but a regular file is refused.
 */
export function readMapRecord(path: string): MapRecord | null {
  let text: string;
  try {
    const opened = openToRead(path);
    if (opened === null) return null;
    try {
      text = readFileSync(opened.fd, 'utf8');
    } finally {
      closeSync(opened.fd);
    }
  } catch (err) {
    throw new ResidencyError('BAD_MAP', `${path}: cannot read it: ${(err as Error).message}`, { cause: err });
  }
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new ResidencyError('BAD_MAP', `${path}: not JSON (${(err as Error).message})`, { cause: err });
  }
  if (typeof o !== 'object' || o === null || o.v !== 1 || o.type !== 'residency_map') {
    throw new ResidencyError('BAD_MAP', `${path}: not a residency map record (expected "v": 1, "type": "residency_map")`);
  }
  const source = o.source;
  if (source !== 'resumed' && source !== '--map' && source !== 'default') throw new ResidencyError('BAD_MAP', `${path}: source: expected "resumed", "--map" or "default"`);
  return {
    v: 1, type: 'residency_map', run: String(o.run), time: String(o.time), step: Number(o.step), source, swaps_applied: Number(o.swaps_applied),
    map: parseRowMap(o.map, `${path} (map)`), boot_map: parseRowMap(o.boot_map, `${path} (boot_map)`), counts: parseCountsDump(o.counts, `${path} (counts)`),
  };
}

/** What a restart resumes: map.json's record, and the map to start from. */
export interface Resume {
  readonly record: MapRecord;
  readonly map: RowMap;
  /** Row exchanges between map.json's map and the one resumed: the moves swaps.jsonl recorded after it. */
  readonly movesAfter: number;
}

/**
 * The map a restart resumes: map.json's, carried forward by the swap lines its run appended after writing it
 * (swaps.jsonl takes each move as it lands, map.json at most once a second), when that run's lines replay
 * cleanly from its boot map (every line naming the experts its rows held, none broken, none dropped before the
 * snapshot); else map.json's own. Null when the folder holds no map.json.
 */
export function resumeMap(dir: string): Resume | null {
  const record = readMapRecord(mapPath(dir));
  if (record === null) return null;
  const own = { record, map: record.map, movesAfter: 0 };
  let text: string;
  try {
    const opened = openToRead(join(dir, FOLDER_FILES.swaps));
    if (opened === null) return own;
    try {
      text = readFileSync(opened.fd, 'utf8');
    } finally {
      closeSync(opened.fd);
    }
  } catch {
    return own;
  }
  const replay = replaySwapLog(text);
  if (replay.run !== record.run || replay.map === null || replay.inconsistent > 0 || replay.broken > 0) return own;
  if (replay.resyncs === 0 && replay.swaps < record.swaps_applied) return own; // lines dropped with no resync yet
  let map: RowMap;
  try {
    map = parseRowMap(replay.map, 'swaps.jsonl replay');
  } catch {
    return own;
  }
  if (!sameGeometry(map, record.map) || map.model !== record.map.model) return own;
  return { record, map, movesAfter: planRestore(record.map, map, 0).length };
}

/** Temporary files of map writes a killed process left behind (map.json.PID.N.tmp): removed at start. */
export function removeStaleMapTemps(dir: string): number {
  const prefix = `${FOLDER_FILES.map}.`;
  let n = 0;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  for (const name of names) {
    if (!name.startsWith(prefix) || !name.endsWith('.tmp')) continue;
    try {
      if (!lstatSync(join(dir, name)).isFile()) continue;
      unlinkSync(join(dir, name));
      n++;
    } catch { /* gone already */ }
  }
  return n;
}

/**
 * Writes map.json: `writeSync` now (at start and at close), `write` in the background (while serving: the
 * temporary file, its fsync and the rename run on libuv's threads; only the JSON is built here), one write at
 * a time, later calls coalesced into one of the latest state. A failed write (a full disk) is counted and
 * reported once until one succeeds; the map.json before it stays whole.
 */
export class MapFile {
  readonly path: string;
  /** Writes that failed since this run began. */
  failures = 0;
  private seq = 0;
  private pending: (() => MapRecord) | null = null;
  private running: Promise<void> | null = null;
  private closed = false;
  private failing = false;

  constructor(dir: string, private readonly onError: (message: string) => void) {
    this.path = mapPath(dir);
  }

  /** Writes `record` now, durably; returns whether it was written. After close, background writes stop. */
  writeSync(record: MapRecord, opts: { close?: boolean } = {}): boolean {
    if (opts.close) this.closed = true;
    try {
      replaceFileSync(this.path, `${JSON.stringify(record)}\n`, { durable: true, tmp: this.tmpName() });
      this.succeeded();
      return true;
    } catch (err) {
      this.failed(err);
      return false;
    }
  }

  /** Asks for a background write of `make()`'s record (built when the write starts: the latest state). */
  write(make: () => MapRecord): void {
    if (this.closed) return;
    this.pending = make;
    this.running ??= this.drain();
  }

  /** Resolves once no background write is running. */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending && !this.closed) {
        const make = this.pending;
        this.pending = null;
        let text: string;
        try {
          text = `${JSON.stringify(make())}\n`;
        } catch (err) {
          this.failed(err); // never an unhandled rejection: nothing awaits this loop
          continue;
        }
        await this.writeAsync(text);
      }
    } finally {
      this.running = null;
    }
  }

  private async writeAsync(text: string): Promise<void> {
    const tmp = this.tmpName();
    try {
      const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644);
      try {
        await fh.writeFile(text);
        await fh.sync();
      } finally {
        await fh.close();
      }
      // A write at close took over: this older one must not land after it.
      if (this.closed) {
        await unlink(tmp).catch(() => {});
        return;
      }
      await rename(tmp, this.path);
      await syncFolderAsync(dirname(this.path));
      this.succeeded();
    } catch (err) {
      await unlink(tmp).catch(() => {});
      this.failed(err);
    }
  }

  private tmpName(): string {
    return `${this.path}.${process.pid}.${++this.seq}.tmp`;
  }

  private succeeded(): void {
    if (!this.failing) return;
    this.failing = false;
    this.onError(`${basename(this.path)}: writing works again (${this.failures} writes failed this run)`);
  }

  private failed(err: unknown): void {
    this.failures++;
    if (this.failing) return;
    this.failing = true;
    this.onError(`${basename(this.path)}: cannot write it, the last one written stays (a later write retries): ${(err as Error).message}`);
  }
}

/** fsync of a folder off the main thread (the rename made durable); file systems that refuse it are left as they are. */
async function syncFolderAsync(dir: string): Promise<void> {
  try {
    const fh = await open(dir, constants.O_RDONLY);
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch { /* EINVAL on some file systems */ }
}
