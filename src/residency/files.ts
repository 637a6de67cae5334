// Reading and writing the residency formats (map, counts dump) as files; validation lives with each format.
import { closeSync, fstatSync, ftruncateSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ResidencyError, type ErrorCode } from '../errors.ts';
import { parseCountsDump, type CountsDump } from './counts.ts';
import { parseRowMap, serializeRowMap, type RowMap } from './rowmap.ts';
import { makeFolder } from '../util/folders.ts';
import { readRegularFileSync } from '../util/regular-file.ts';
import { identityOf, openToWrite, writeAll } from './folder-io.ts';

function readJson(path: string, code: ErrorCode, what: string): unknown {
  let text: string;
  try {
    text = readRegularFileSync(path); // a FIFO or folder named by --map / --prior is refused, not waited on
  } catch (err) {
    throw new ResidencyError(code, `cannot read ${what} ${path}: ${(err as Error).message}`, { cause: err });
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ResidencyError(code, `${what} ${path} is not JSON: ${(err as Error).message}`, { cause: err });
  }
}

export function loadRowMap(path: string): RowMap {
  return parseRowMap(readJson(path, 'BAD_MAP', 'map'), path);
}

export function saveRowMap(path: string, map: RowMap): void {
  makeFolder(dirname(path), `map ${path}: folder`);
  writeFileSync(path, serializeRowMap(map));
}

export function loadCountsDump(path: string): CountsDump {
  return parseCountsDump(readJson(path, 'BAD_COUNTS', 'counts dump'), path);
}

/**
 * Writes a dump (the control file's dump_counts: anywhere, missing folders made). `ownFiles` (the residency
 * folder's files by identity, folder-io.ts): a path reaching one of them by any name (an alias of the folder,
 * a link, a hard link) is refused. Never through a symbolic link at the name, never into a FIFO or device.
 */
export function saveCountsDump(path: string, dump: CountsDump, ownFiles?: ReadonlyMap<string, string>): void {
  // Not mkdirSync's recursive mode: under /proc it never returns (src/util/folders.ts), and dump_counts
  // paths come from the control file and the HTTP API.
  makeFolder(dirname(path), `dump_counts ${path}: folder`);
  writeDump(path, path, dump, ownFiles);
}

/**
 * Writes a dump as `dir/name` (a plain name, checked by the caller) for a remote caller: no folder is made,
 * and the error names the file, not the folder's absolute path.
 */
export function saveCountsDumpIn(dir: string, name: string, dump: CountsDump, ownFiles?: ReadonlyMap<string, string>): void {
  writeDump(join(dir, name), `'${name}'`, dump, ownFiles, 'in the residency folder');
}

/** Opens first, checks what was opened (type, identity), and only then truncates and writes. */
function writeDump(path: string, shown: string, dump: CountsDump, ownFiles: ReadonlyMap<string, string> | undefined, where = ''): void {
  const at = where ? ` ${where}` : '';
  let opened: { fd: number };
  try {
    opened = openToWrite(path);
  } catch (err) {
    throw new ResidencyError('BAD_CONTROL', `dump_counts ${shown}: cannot write it${at}: ${(err as Error).message}`, { cause: err });
  }
  const { fd } = opened;
  try {
    const own = ownFiles?.get(identityOf(fstatSync(fd)));
    if (own !== undefined) {
      throw new ResidencyError('BAD_CONTROL', `dump_counts ${shown}: that is one of the residency folder's own files (${own}, reached by another name); pick another name`);
    }
    ftruncateSync(fd, 0);
    writeAll(fd, Buffer.from(countsDumpText(dump)));
  } catch (err) {
    if (err instanceof ResidencyError) throw err;
    throw new ResidencyError('BAD_CONTROL', `dump_counts ${shown}: cannot write it${at}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, { cause: err });
  } finally {
    closeSync(fd);
  }
}

/** One layer per line: dumps are read by people as well as by fit-map. */
function countsDumpText(dump: CountsDump): string {
  const { decayed, cumulative, ...head } = dump;
  const table = (rows: readonly (readonly number[])[]) => `[\n${rows.map((r) => `    ${JSON.stringify(r)}`).join(',\n')}\n  ]`;
  const headJson = JSON.stringify(head).slice(1, -1);
  return `{${headJson},\n  "decayed": ${table(decayed)},\n  "cumulative": ${table(cumulative)}\n}\n`;
}
