// How the residency files are opened: never through a symbolic link at the name (O_NOFOLLOW), never blocking
// on a FIFO or device (O_NONBLOCK, then a regular-file check on the open descriptor), and the folder's own
// files told apart by identity (device and inode), not by name, so no alias, link or case reaches them.
import { closeSync, constants, fstatSync, fsyncSync, openSync, renameSync, statSync, unlinkSync, writeSync, type Stats } from 'node:fs';
import { dirname, join } from 'node:path';
import { FOLDER_FILES } from './folder-files.ts';
import { kindOf } from '../util/regular-file.ts';

const { O_WRONLY, O_RDONLY, O_CREAT, O_EXCL, O_APPEND, O_NOFOLLOW, O_NONBLOCK } = constants;

export { kindOf };

/** Why an open for writing failed, in words (the errno otherwise). */
export function openProblem(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ELOOP' ? 'it is a symbolic link' : code === 'ENXIO' ? 'it is a FIFO with no reader' : code === 'EISDIR' ? 'it is a folder' : code ?? (err as Error).message;
}

/** An error whose message says what is wrong with the file (the errno stays as `code`). */
function fileError(message: string, code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code });
}

/**
 * Opens `path` to write (created 0644 if missing, never truncated here: the caller truncates once it has
 * checked what it opened). A symbolic link at the name, a FIFO, a folder or a device is refused with an
 * error saying which. Returns the descriptor and its stat.
 */
export function openToWrite(path: string, opts: { append?: boolean; exclusive?: boolean } = {}): { fd: number; st: Stats } {
  let fd: number;
  try {
    fd = openSync(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | (opts.append ? O_APPEND : 0) | (opts.exclusive ? O_EXCL : 0), 0o644);
  } catch (err) {
    throw fileError(openProblem(err), (err as NodeJS.ErrnoException).code ?? 'EIO');
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw fileError(`it is ${kindOf(st)}, not a regular file`, 'EINVAL');
  }
  return { fd, st };
}

/** Opens `path` to read without blocking on a FIFO and without following a link at the name; null when missing. */
export function openToRead(path: string): { fd: number; st: Stats } | null {
  let fd: number;
  try {
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw fileError(openProblem(err), (err as NodeJS.ErrnoException).code ?? 'EIO');
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw fileError(`it is ${kindOf(st)}, not a regular file`, 'EINVAL');
  }
  return { fd, st };
}

/** Writes all of `bytes` at the descriptor's position (a short write is continued, an error thrown). */
export function writeAll(fd: number, bytes: Uint8Array): void {
  for (let at = 0; at < bytes.length;) at += writeSync(fd, bytes, at, bytes.length - at);
}

export const identityOf = (st: Pick<Stats, 'dev' | 'ino'>): string => `${st.dev}:${st.ino}`;

/**
 * The identities of the residency folder's own files that exist now (the record, the control files and
 * their consumed copies, the map), so a path can be checked against them whatever name it reaches them by.
 */
export function ownFileIdentities(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of Object.values(FOLDER_FILES)) {
    for (const n of [name, `${name}.applied`, `${name}.rejected`, `${name}.stale`]) {
      try {
        out.set(identityOf(statSync(join(dir, n))), n);
      } catch { /* not there */ }
    }
  }
  return out;
}

/**
 * Replaces `path` whole: the text goes to a fresh temporary file beside it (O_EXCL, so no existing file or
 * link is ever written through), then is renamed over `path`, so a reader or a crash sees the old file or the
 * new one, never a part. `durable`: the temporary file is fsynced before the rename and the folder after it,
 * so the new file survives a power loss too.
 */
export function replaceFileSync(path: string, text: string, opts: { durable?: boolean; tmp?: string } = {}): void {
  const tmp = opts.tmp ?? `${path}.tmp`;
  try { unlinkSync(tmp); } catch { /* none left over */ }
  const { fd } = openToWrite(tmp, { exclusive: true });
  try {
    writeAll(fd, Buffer.from(text));
    if (opts.durable) fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw err;
  }
  closeSync(fd);
  try {
    renameSync(tmp, path);
  } catch (err) {
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw err;
  }
  if (opts.durable) syncFolder(dirname(path));
}

/** fsync of a folder (its entries: a rename made durable); file systems that refuse it are left as they are. */
export function syncFolder(dir: string): void {
  let fd: number;
  try {
    fd = openSync(dir, O_RDONLY);
  } catch {
    return;
  }
  try {
    fsyncSync(fd);
  } catch { /* EINVAL on some file systems */ } finally {
    closeSync(fd);
  }
}
