// Telemetry files: appends telemetry.jsonl and swaps.jsonl lines and writes the step ring, under one folder.
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { DrainLine, StepRingDump, SwapLine } from './telemetry.ts';
import { makeFolder } from '../util/folders.ts';
import { FOLDER_FILES } from './folder-files.ts';

/**
 * Synchronous appends: a drain happens every 64 steps and a swap a few times per drain, so a blocking
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

  constructor(
    readonly dir: string,
    private readonly onError: (message: string) => void = (m) => console.error(`residency: ${m}`),
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
  }

  drain(line: DrainLine): void {
    this.write(this.telemetryPath, `${JSON.stringify(line)}\n`, true);
  }

  swaps(lines: readonly SwapLine[]): void {
    if (lines.length > 0) this.write(this.swapsPath, lines.map((l) => `${JSON.stringify(l)}\n`).join(''), true);
  }

  steps(dump: StepRingDump): void {
    this.write(this.stepsPath, `${JSON.stringify(dump)}\n`, false);
  }

  private write(path: string, text: string, append: boolean): void {
    const once = () => (append ? appendFileSync(path, text) : writeFileSync(path, text));
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
