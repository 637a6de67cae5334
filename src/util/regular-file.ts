// Reading a file named by a user or a checkpoint: only a regular file, checked on the open descriptor, and
// opened non-blocking, because opening a FIFO for reading blocks until a writer comes (a FIFO at config.json
// hung the loader) and a folder or device is never what was meant.
import { closeSync, constants, fstatSync, openSync, readFileSync, type Stats } from 'node:fs';
import { open } from 'node:fs/promises';

/** What a file that is not a regular file is, for messages: 'a FIFO', 'a folder', ... */
export function kindOf(st: Stats): string {
  return st.isFIFO() ? 'a FIFO' : st.isDirectory() ? 'a folder' : st.isSocket() ? 'a socket' : st.isCharacterDevice() || st.isBlockDevice() ? 'a device' : st.isSymbolicLink() ? 'a symbolic link' : 'not a plain file';
}

/** The error for a path that is not a regular file (code ENOTREG, so callers can tell it from ENOENT). */
export function notRegular(st: Stats): NodeJS.ErrnoException {
  return Object.assign(new Error(`it is ${kindOf(st)}, not a regular file`), { code: 'ENOTREG' });
}

/** The whole of a regular file as UTF-8; ENOENT and the like as thrown by open, ENOTREG for anything else. */
export async function readRegularFile(path: string): Promise<string> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw notRegular(st);
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

/** readRegularFile, synchronously. */
export function readRegularFileSync(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw notRegular(st);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}
