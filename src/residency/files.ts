// Reading and writing the residency formats (map, counts dump) as files; validation lives with each format.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { ResidencyError, type ErrorCode } from '../errors.ts';
import { parseCountsDump, type CountsDump } from './counts.ts';
import { parseRowMap, serializeRowMap, type RowMap } from './rowmap.ts';

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
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, serializeRowMap(map));
}

export function loadCountsDump(path: string): CountsDump {
  return parseCountsDump(readJson(path, 'BAD_COUNTS', 'counts dump'), path);
}

export function saveCountsDump(path: string, dump: CountsDump): void {
  mkdirSync(dirname(path), { recursive: true });
  // One layer per line: dumps are read by people as well as by fit-map.
  const { decayed, cumulative, ...head } = dump;
  const table = (rows: readonly (readonly number[])[]) => `[\n${rows.map((r) => `    ${JSON.stringify(r)}`).join(',\n')}\n  ]`;
  const headJson = JSON.stringify(head).slice(1, -1);
  writeFileSync(path, `{${headJson},\n  "decayed": ${table(decayed)},\n  "cumulative": ${table(cumulative)}\n}\n`);
}
