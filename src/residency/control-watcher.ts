// Watches a control file (and a GO file) between steps: file I/O only; parsing and applying live in control.ts.
import { closeSync, constants, fstatSync, openSync, readFileSync, renameSync, statSync, type Stats } from 'node:fs';
import { GO_COMMAND, parseControlText, type ControlCommand } from './control.ts';

export interface ControlWatcherOptions {
  /** The JSON control file; re-read whenever its mtime or size changes. */
  readonly controlPath?: string;
  /** A file whose appearance means {"freeze": false, "baseline": true} (the seeds' start signal); fires once. */
  readonly goPath?: string;
  /** Where rejections and reads are reported. */
  readonly log?: (message: string) => void;
}

/**
 * A command found by a poll, or a rejection (nothing is applied). `claimed`: where the file was moved
 * before it was read (`control.json.applied`); the driver calls `rejected(event)` if it refuses the command.
 */
export type ControlEvent =
  | { readonly source: string; readonly command: ControlCommand; readonly claimed?: string }
  | { readonly source: string; readonly error: string; readonly claimed?: string };

/** Where a consumed control file goes: the last one applied, the last one refused, one found at boot (GO.stale too). */
export const consumedPath = (controlPath: string, as: 'applied' | 'rejected' | 'stale') => `${controlPath}.${as}`;

/**
 * Polling by mtime rather than fs.watch: one stat per poll, no event loop needed (the engine's step loop
 * may be synchronous), and it works the same on every file system. Call `poll()` between steps.
 *
 * A control file is consumed: renamed to control.json.applied before it is read (so a file written while
 * one is being applied is never lost, and a command is never applied twice), and to .rejected if refused.
 * One found at start is left over from an earlier run (its dump_counts would overwrite that run's dump):
 * it is moved to control.json.stale, not applied; so is a GO file found at start (GO.stale). Configure a run with flags, or write the file once it runs.
 * Where the folder does not allow the rename, the file stays and is re-read whenever its mtime, size or
 * inode changes.
 */
export class ControlFileWatcher {
  private seen = '';
  private goFired = false;
  /** A GO file found at start that could not be moved aside: that one never fires. */
  private staleGo = '';

  constructor(private readonly opts: ControlWatcherOptions) {
    const path = opts.controlPath;
    if (path && statOrNone(path)?.isFile()) this.seen = setAside(path, 'control file', opts.log);
    // A GO from an earlier run would start adaptation at once: set aside like the control file.
    const go = opts.goPath;
    if (go && statOrNone(go)) this.staleGo = setAside(go, 'GO file', opts.log);
  }

  poll(): ControlEvent[] {
    const events: ControlEvent[] = [];
    const { goPath, controlPath } = this.opts;
    if (goPath && !this.goFired) {
      const st = statOrNone(goPath);
      if (st && stampOf(st) !== this.staleGo) {
        this.goFired = true;
        events.push({ source: goPath, command: GO_COMMAND });
      }
    }
    if (controlPath) {
      const st = statOrNone(controlPath);
      if (st === undefined) return events; // no control file yet
      const stamp = stampOf(st);
      if (stamp !== this.seen) {
        this.seen = stamp;
        let readFrom = controlPath;
        let claimed: string | undefined;
        if (st.isFile()) {
          try {
            renameSync(controlPath, consumedPath(controlPath, 'applied'));
            readFrom = claimed = consumedPath(controlPath, 'applied');
            this.seen = ''; // the path is free again: whatever appears there next is new
          } catch { /* a folder we may not rename in: read in place, tracked by stamp */ }
        }
        let text: string | null;
        try {
          text = readRegularFile(readFrom);
        } catch (err) {
          text = null;
          events.push({ source: controlPath, error: `cannot read: ${(err as Error).message}`, ...(claimed ? { claimed } : {}) });
        }
        if (text !== null) {
          const parsed = parseControlText(text);
          const at = claimed ? { claimed } : {};
          events.push(parsed.ok ? { source: controlPath, command: parsed.command, ...at } : { source: controlPath, error: parsed.error, ...at });
        }
      }
    }
    for (const e of events) {
      if (!('error' in e)) continue;
      this.rejected(e);
      this.opts.log?.(`control file ${e.source} rejected, nothing changed: ${e.error}`);
    }
    return events;
  }

  /** Marks a claimed control file as refused (control.json.rejected), for the operator to look at. */
  rejected(event: ControlEvent): void {
    if (!event.claimed || !this.opts.controlPath) return;
    try {
      renameSync(event.claimed, consumedPath(this.opts.controlPath, 'rejected'));
    } catch { /* the record of a refusal is a courtesy; the log line says it all */ }
  }
}

const stampOf = (st: Stats) => `${st.mtimeMs}:${st.size}:${st.ino}`;

/**
 * Moves a file found at start (left from an earlier run) to PATH.stale, so it is not applied; where it
 * cannot be moved, returns its stamp (the caller then never applies that one), else ''.
 */
function setAside(path: string, what: string, log: ((message: string) => void) | undefined): string {
  try {
    renameSync(path, consumedPath(path, 'stale'));
    log?.(`${what} ${path} predates this run: not applied, moved to ${consumedPath(path, 'stale')}`);
    return '';
  } catch (err) {
    log?.(`${what} ${path} predates this run: not applied (cannot move it aside: ${(err as NodeJS.ErrnoException).code})`);
    const st = statOrNone(path);
    return st ? stampOf(st) : '';
  }
}

function statOrNone(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch {
    return undefined;
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
