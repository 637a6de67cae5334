// Telemetry files: appends telemetry.jsonl and swaps.jsonl lines and writes the step ring, under one folder.
import { randomUUID } from 'node:crypto';
import { appendFileSync, closeSync, fstatSync, ftruncateSync, openSync, readSync, renameSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { BootLine, DrainLine, StepRingDump, SwapLine } from './telemetry.ts';
import { makeFolder } from '../util/folders.ts';
import { FOLDER_FILES } from './folder-files.ts';

/**
 * Synchronous appends: a drain happens every 16 steps (by default) and a swap a few times per drain, so a blocking
 * write of one line is cheap next to a step, and nothing is lost if the process dies.
 *
 * Telemetry is a record, not part of serving: a folder that vanishes mid-run is made again, and a write
 * that still fails is reported once per file (through `onError`) and dropped, never thrown into the
 * engine's step loop, where it would end every request in the batch.
 */
export class TelemetryWriter {
  readonly telemetryPath: string;
  readonly swapsPath: string;
  readonly stepsPath: string;
  private readonly failing = new Set<string>();

  /** This process's run: named in the boot record of every file, so runs appended to one folder stay apart. */
  readonly run: string = randomUUID();

  /**
   * Opens the folder for a new run: a torn last line (a process killed mid-append) is cut off each .jsonl
   * file, then a boot record is appended to each, carrying `info` (model, geometry: whatever the caller
   * knows) and how many torn bytes were dropped.
   */
  constructor(
    readonly dir: string,
    private readonly onError: (message: string) => void = (m) => console.error(`residency: ${m}`),
    info: Readonly<Record<string, unknown>> = {},
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
    for (const path of [this.telemetryPath, this.swapsPath]) {
      let dropped = 0;
      try {
        dropped = repairTornLine(path);
      } catch (err) {
        this.onError(`telemetry: cannot check ${path} for a torn last line: ${(err as Error).message}`);
      }
      if (dropped > 0) this.onError(`telemetry: ${basename(path)} ended in a torn line (${dropped} bytes, a process killed mid-write): cut off`);
      const boot: BootLine = { v: 1, type: 'boot', run: this.run, time, pid: process.pid, ...info, torn_bytes_dropped: dropped };
      this.write(path, `${JSON.stringify(boot)}\n`, true);
    }
  }

  drain(line: DrainLine): void {
    this.write(this.telemetryPath, `${JSON.stringify(line)}\n`, true);
  }

  swaps(lines: readonly SwapLine[]): void {
    if (lines.length > 0) this.write(this.swapsPath, lines.map((l) => `${JSON.stringify(l)}\n`).join(''), true);
  }

  /** Rewrites steps.json whole, through a temporary file and a rename: a reader (or a kill) never sees half. */
  steps(dump: StepRingDump): void {
    this.write(this.stepsPath, `${JSON.stringify({ ...dump, run: this.run })}\n`, false);
  }

  private write(path: string, text: string, append: boolean): void {
    const once = () => {
      if (append) return appendFileSync(path, text);
      writeFileSync(`${path}.tmp`, text);
      renameSync(`${path}.tmp`, path);
    };
    try {
      try {
        once();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        makeFolder(this.dir, 'residency folder'); // the folder was removed under us: make it again
        once();
      }
      if (this.failing.delete(path)) this.onError(`telemetry: writing ${path} works again`);
    } catch (err) {
      if (this.failing.has(path)) return;
      this.failing.add(path);
      this.onError(`telemetry: cannot write ${path}, dropping its lines until it works again: ${(err as Error).message}`);
    }
  }
}

/**
 * Cuts a torn last line (no final newline) off a .jsonl file; returns the bytes dropped (0: none, or no
 * file). Reads backwards from the end in 64 KiB blocks, so a long file costs one read.
 */
export function repairTornLine(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, 'r+');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
  try {
    const size = fstatSync(fd).size;
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
