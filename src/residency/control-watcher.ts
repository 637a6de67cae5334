// Watches a control file (and a GO file) between steps: file I/O only; parsing and applying live in control.ts.
import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync, statSync, type Stats } from 'node:fs';
import { GO_COMMAND, parseControlText, type ControlCommand } from './control.ts';

export interface ControlWatcherOptions {
  /** The JSON control file; re-read whenever its mtime or size changes. */
  readonly controlPath?: string;
  /** A file whose appearance means {"freeze": false, "baseline": true} (the seeds' start signal); fires once. */
  readonly goPath?: string;
  /** Where rejections and reads are reported. */
  readonly log?: (message: string) => void;
}

/** A command found by a poll, or a rejection (the file is left as is and nothing is applied). */
export type ControlEvent =
  | { readonly source: string; readonly command: ControlCommand }
  | { readonly source: string; readonly error: string };

/**
 * Polling by mtime rather than fs.watch: one stat per poll, no event loop needed (the engine's step loop
 * may be synchronous), and it works the same on every file system. Call `poll()` between steps.
 */
export class ControlFileWatcher {
  private seen = '';
  private goFired = false;

  constructor(private readonly opts: ControlWatcherOptions) {
    // A control file present at start counts as new: that is how a run is configured before it starts.
  }

  poll(): ControlEvent[] {
    const events: ControlEvent[] = [];
    const { goPath, controlPath } = this.opts;
    if (goPath && !this.goFired && existsSync(goPath)) {
      this.goFired = true;
      events.push({ source: goPath, command: GO_COMMAND });
    }
    if (controlPath) {
      let stamp: string;
      try {
        const st = statSync(controlPath);
        stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
      } catch {
        return events; // no control file yet
      }
      if (stamp !== this.seen) {
        this.seen = stamp;
        let text: string | null;
        try {
          text = readRegularFile(controlPath);
        } catch (err) {
          text = null;
          events.push({ source: controlPath, error: `cannot read: ${(err as Error).message}` });
        }
        if (text !== null) {
          const parsed = parseControlText(text);
          events.push(parsed.ok ? { source: controlPath, command: parsed.command } : { source: controlPath, error: parsed.error });
        }
      }
    }
    for (const e of events) if ('error' in e) this.opts.log?.(`control file ${e.source} rejected, nothing changed: ${e.error}`);
    return events;
  }
}

/** What a non-regular file is, for the message. */
function kindOf(st: Stats): string {
  return st.isFIFO() ? 'a FIFO' : st.isDirectory() ? 'a folder' : st.isSocket() ? 'a socket' : st.isCharacterDevice() || st.isBlockDevice() ? 'a device' : 'not a plain file';
}

/**
 * Reads a control file only if it is a regular file. Opened non-blocking and checked on the open
 * descriptor: opening a FIFO for reading blocks until a writer comes, and this runs on the main thread
 * between steps, so a FIFO at the path would hang the whole server (a stat first would leave a race).
 */
function readRegularFile(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`not a regular file (${kindOf(st)}); write the command to a plain file and rename it into place`);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}
