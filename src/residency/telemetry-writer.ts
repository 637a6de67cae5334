// Telemetry files: appends telemetry.jsonl and swaps.jsonl lines and writes the step ring, under one folder.
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrainLine, StepRingDump, SwapLine } from './telemetry.ts';

/**
 * Synchronous appends: a drain happens every 64 steps and a swap a few times per drain, so a blocking
 * write of one line is cheap next to a step, and nothing is lost if the process dies.
 */
export class TelemetryWriter {
  readonly telemetryPath: string;
  readonly swapsPath: string;
  readonly stepsPath: string;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
    this.telemetryPath = join(dir, 'telemetry.jsonl');
    this.swapsPath = join(dir, 'swaps.jsonl');
    this.stepsPath = join(dir, 'steps.json');
  }

  drain(line: DrainLine): void {
    appendFileSync(this.telemetryPath, `${JSON.stringify(line)}\n`);
  }

  swaps(lines: readonly SwapLine[]): void {
    if (lines.length > 0) appendFileSync(this.swapsPath, lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  }

  steps(dump: StepRingDump): void {
    writeFileSync(this.stepsPath, `${JSON.stringify(dump)}\n`);
  }
}
