// Telemetry files: appends telemetry.jsonl and swaps.jsonl lines and writes the step ring, under one folder.
import { randomUUID } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, openSync, readSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { RowMap } from './rowmap.ts';
import type { BootLine, DrainLine, ResyncLine, StepRingDump, SwapLine } from './telemetry.ts';
import { makeFolder } from '../util/folders.ts';
import { FOLDER_FILES } from './folder-files.ts';
import { kindOf, openProblem, openToWrite, replaceFileSync, writeAll } from './folder-io.ts';

/** Errors that mean the folder cannot be written at all (not a passing condition such as a full disk). */
const UNWRITABLE = new Set(['EACCES', 'EPERM', 'EROFS']);

/** How often, at most, a resync line is tried while swaps.jsonl has a gap and no swap needs writing. */
const RESYNC_RETRY_MS = 500;

type JsonlFile = 'telemetry' | 'swaps';

/**
 * Synchronous appends: a drain happens every 16 steps (by default) and a swap a few times per drain, so a blocking
 * write of one line is cheap next to a step, and nothing is lost if the process dies.
 *
 * Telemetry is a record, not part of serving: a folder that vanishes mid-run is made again, and a write
 * that still fails (a full disk) is reported once per episode (through `onError`), counted and dropped,
 * never thrown into the engine's step loop, where it would end every request in the batch. A failed append
 * leaves no part of its line: the file is cut back to where the append began (or, if even that fails, the
 * next append starts on a new line), so later lines never join a broken one. Lines dropped from swaps.jsonl
 * are followed, once writes work again, by a resync line carrying the whole map, so replaying the file from
 * its boot map still ends at the live map. Opened without following a link at the name and without blocking
 * on a FIFO (folder-io.ts).
 */
export class TelemetryWriter {
  readonly telemetryPath: string;
  readonly swapsPath: string;
  readonly stepsPath: string;
  /** Lines dropped since this run began (a full disk), by file: drain lines carry them, /metrics too. */
  readonly dropped: Record<JsonlFile, number> = { telemetry: 0, swaps: 0 };
  private readonly failing = new Set<string>();
  /** Files whose last failed append could not be cut back: the next append starts on a new line. */
  private readonly torn = new Set<string>();
  /** swaps.jsonl lines dropped since its last resync line: a resync is owed. */
  private swapGap = 0;
  private resyncTriedAt = -Infinity;

  /** This process's run: named in the boot record of every file, so runs appended to one folder stay apart. */
  readonly run: string = randomUUID();

  /**
   * Opens the folder for a new run: a torn last line (a process killed mid-append) is cut off each .jsonl
   * file, then a boot record is appended to each, carrying `info` (model, geometry: whatever the caller
   * knows; `swapsInfo` only in swaps.jsonl's, e.g. the boot map) and how many torn bytes were dropped.
   * A folder that cannot be written at all (read-only, no permission) is refused here, as one that cannot be
   * made is: serving with the record silently off would be worse.
   */
  constructor(
    readonly dir: string,
    private readonly onError: (message: string) => void = (m) => console.error(`residency: ${m}`),
    info: Readonly<Record<string, unknown>> = {},
    swapsInfo: Readonly<Record<string, unknown>> = {},
  ) {
    try {
      makeFolder(dir, 'residency folder');
    } catch (err) {
      if (err instanceof ResidencyError) throw err;
      throw new ResidencyError('BAD_ARGUMENT', `residency folder ${dir}: cannot make it: ${(err as Error).message}`, { cause: err });
    }
    this.telemetryPath = join(dir, FOLDER_FILES.telemetry);
    this.swapsPath = join(dir, FOLDER_FILES.swaps);
    this.stepsPath = join(dir, FOLDER_FILES.steps);
    const time = new Date().toISOString();
    for (const [file, path] of [['telemetry', this.telemetryPath], ['swaps', this.swapsPath]] as const) {
      let dropped = 0;
      try {
        dropped = repairTornLine(path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? '';
        if (UNWRITABLE.has(code)) throw unwritable(dir, path, err);
        this.onError(`telemetry: cannot check ${path} for a torn last line: ${(err as Error).message}`);
      }
      if (dropped > 0) this.onError(`telemetry: ${basename(path)} ended in a torn line (${dropped} bytes, a process killed mid-write): cut off`);
      const boot: BootLine = { v: 1, type: 'boot', run: this.run, time, pid: process.pid, ...info, ...(file === 'swaps' ? swapsInfo : {}), torn_bytes_dropped: dropped };
      const code = this.append(file, path, `${JSON.stringify(boot)}\n`, 1);
      if (code && UNWRITABLE.has(code)) throw unwritable(dir, path);
    }
  }

  /** Appends a drain line, with the lines dropped so far this run. */
  drain(line: DrainLine): void {
    const withDrops: DrainLine = { ...line, telemetry_lines_dropped: this.dropped.telemetry, swap_lines_dropped: this.dropped.swaps };
    this.append('telemetry', this.telemetryPath, `${JSON.stringify(withDrops)}\n`, 1);
  }

  /** Whether swaps.jsonl owes a resync line (lines were dropped): the caller then passes the map to swaps(). */
  get swapsNeedResync(): boolean {
    return this.swapGap > 0;
  }

  /**
   * Appends swap lines. `mapBefore`: the map before these swaps landed, given while swapsNeedResync: a resync
   * line carrying it goes first, in the same append, so a replay resets to it and then applies these lines.
   */
  swaps(lines: readonly SwapLine[], mapBefore?: RowMap): void {
    const text = lines.map((l) => `${JSON.stringify(l)}\n`).join('');
    if (this.swapGap > 0 && mapBefore) {
      // While the disk stays full, a resync alone is tried now and then, not at every step.
      const now = performance.now();
      if (lines.length === 0 && now - this.resyncTriedAt < RESYNC_RETRY_MS) return;
      this.resyncTriedAt = now;
      const resync: ResyncLine = { v: 1, type: 'resync', time: new Date().toISOString(), lines_dropped: this.swapGap, map: mapBefore };
      if (this.append('swaps', this.swapsPath, `${JSON.stringify(resync)}\n${text}`, lines.length) === null) this.swapGap = 0;
      return;
    }
    if (text !== '') this.append('swaps', this.swapsPath, text, lines.length);
  }

  /** Rewrites steps.json whole, through a temporary file and a rename: a reader (or a kill) never sees half. */
  steps(dump: StepRingDump): void {
    const text = `${JSON.stringify({ ...dump, run: this.run })}\n`;
    this.write(this.stepsPath, () => replaceFileSync(this.stepsPath, text));
  }

  /**
   * Appends `text` (`lines` whole lines) to `path`; returns null when written, else the error's code (the lines
   * are then counted as dropped). On a failed write the file is cut back to its length before the append.
   */
  private append(file: JsonlFile, path: string, text: string, lines: number): string | null {
    const code = this.write(path, () => {
      const { fd, st } = openToWrite(path, { append: true });
      try {
        let bytes = Buffer.from(text);
        if (this.torn.has(path)) {
          // The last failed append could not be cut back: start on a new line, so its fragment stays alone.
          bytes = Buffer.concat([Buffer.from('\n'), bytes]);
        }
        try {
          writeAll(fd, bytes);
          this.torn.delete(path);
        } catch (err) {
          try {
            ftruncateSync(fd, st.size);
          } catch {
            this.torn.add(path);
          }
          throw err;
        }
      } finally {
        closeSync(fd);
      }
    });
    if (code !== null) {
      this.dropped[file] += lines;
      if (file === 'swaps') this.swapGap += lines;
    }
    return code;
  }

  /** Runs a write, making the folder again if it vanished; a failure is reported once until writes work again. */
  private write(path: string, once: () => void): string | null {
    try {
      try {
        once();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        makeFolder(this.dir, 'residency folder'); // the folder was removed under us: make it again
        once();
      }
      if (this.failing.delete(path)) {
        this.onError(`telemetry: writing ${path} works again (lines dropped this run: telemetry.jsonl ${this.dropped.telemetry}, swaps.jsonl ${this.dropped.swaps})`);
      }
      return null;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
      if (!this.failing.has(path)) {
        this.failing.add(path);
        this.onError(`telemetry: cannot write ${path}, dropping its lines until it works again: ${(err as Error).message}`);
      }
      return code;
    }
  }
}

function unwritable(dir: string, path: string, cause?: unknown): ResidencyError {
  return new ResidencyError('BAD_ARGUMENT', `residency folder ${dir}: cannot write ${basename(path)} (read-only or no permission): give a folder this process can write, or leave out --residency-dir`, { cause });
}

/**
 * Cuts a torn last line (no final newline) off a .jsonl file; returns the bytes dropped (0: none, or no
 * file). Reads backwards from the end in 64 KiB blocks, so a long file costs one read. Opened without
 * following a link at the name and without blocking on a FIFO; anything but a regular file is refused.
 */
export function repairTornLine(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return 0;
    throw Object.assign(new Error(openProblem(err)), { code });
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw Object.assign(new Error(`it is ${kindOf(st)}, not a regular file`), { code: 'EINVAL' });
    const size = st.size;
    if (size === 0) return 0;
    const block = Buffer.alloc(64 * 1024);
    let end = size;
    while (end > 0) {
      const start = Math.max(0, end - block.length);
      const n = readSync(fd, block, 0, end - start, start);
      const at = block.subarray(0, n).lastIndexOf(0x0a);
      if (at >= 0) {
        const keep = start + at + 1;
        if (keep < size) ftruncateSync(fd, keep);
        return size - keep;
      }
      end = start;
    }
    ftruncateSync(fd, 0); // not one whole line in the file
    return size;
  } finally {
    closeSync(fd);
  }
}
