// Reading and writing the residency formats (map, counts dump) as files; validation lives with each format.
import { closeSync, constants, fstatSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ResidencyError, type ErrorCode } from '../errors.ts';
import { parseCountsDump, type CountsDump } from './counts.ts';
import { parseRowMap, serializeRowMap, type RowMap } from './rowmap.ts';
import { makeFolder } from '../util/folders.ts';

function readJson(path: string, code: ErrorCode, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
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

export function saveCountsDump(path: string, dump: CountsDump): void {
  // Not mkdirSync's recursive mode: under /proc it never returns (src/util/folders.ts), and dump_counts
  // paths come from the control file and the HTTP API.
  makeFolder(dirname(path), `dump_counts ${path}: folder`);
  writeFileSync(path, countsDumpText(dump));
}

/**
 * Writes a dump as `dir/name` (a plain name, checked by the caller) for a remote caller: no folder is made,
 * a symbolic link at the name is not followed (O_NOFOLLOW), a FIFO or device is not written to (O_NONBLOCK,
 * then a regular-file check), and the error names the file, not the folder's absolute path.
 */
export function saveCountsDumpIn(dir: string, name: string, dump: CountsDump): void {
  const { O_WRONLY, O_CREAT, O_TRUNC, O_NOFOLLOW, O_NONBLOCK } = constants;
  let fd: number;
  try {
    fd = openSync(join(dir, name), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK, 0o644);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ELOOP' ? 'it is a symbolic link' : code === 'ENXIO' ? 'it is a FIFO' : code === 'EISDIR' ? 'it is a folder' : code ?? 'error';
    throw new ResidencyError('BAD_CONTROL', `dump_counts '${name}': cannot write it in the residency folder: ${why}`, { cause: err });
  }
  try {
    if (!fstatSync(fd).isFile()) throw new ResidencyError('BAD_CONTROL', `dump_counts '${name}': not a regular file in the residency folder`);
    const bytes = Buffer.from(countsDumpText(dump));
    for (let at = 0; at < bytes.length;) at += writeSync(fd, bytes, at);
  } catch (err) {
    if (err instanceof ResidencyError) throw err;
    throw new ResidencyError('BAD_CONTROL', `dump_counts '${name}': cannot write it in the residency folder: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, { cause: err });
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
