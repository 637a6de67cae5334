// Reading and writing the residency formats (map, counts dump) as files; validation lives with each format.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
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
  // One layer per line: dumps are read by people as well as by fit-map.
  const { decayed, cumulative, ...head } = dump;
  const table = (rows: readonly (readonly number[])[]) => `[\n${rows.map((r) => `    ${JSON.stringify(r)}`).join(',\n')}\n  ]`;
  const headJson = JSON.stringify(head).slice(1, -1);
  writeFileSync(path, `{${headJson},\n  "decayed": ${table(decayed)},\n  "cumulative": ${table(cumulative)}\n}\n`);
}
