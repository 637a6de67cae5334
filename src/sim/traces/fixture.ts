// Reads the fixture trace layout: <domain>.bin (or .bin.gz) = uint8[tokens][layers][top_k] plus index.json.
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import { readFileUnzipped } from '../../util/gzip-file.ts';
import { validateTrace, traceSet, type RoutingTrace, type TraceSet } from './trace.ts';

interface IndexDomain {
  tokens: number;
  doc_starts: number[];
}

function field<T>(obj: Record<string, unknown>, key: string, file: string, check: (v: unknown) => v is T, expected: string): T {
  const v = obj[key];
  if (!check(v)) throw new ResidencyError('BAD_TRACE', `${file}: field '${key}' must be ${expected}, got ${JSON.stringify(v)}`);
  return v;
}
const isPosInt = (v: unknown): v is number => Number.isInteger(v) && (v as number) > 0;

/** True when `dir` looks like the fixture layout (an index.json next to .bin files). */
export function isFixtureDir(dir: string): boolean {
  return existsSync(join(dir, 'index.json'));
}

/** The file of a domain's routing: `<domain>.bin`, or `<domain>.bin.gz` as a checkout keeps it. */
export function traceFile(dir: string, domain: string): string {
  const plain = join(dir, `${domain}.bin`);
  return existsSync(plain) || !existsSync(`${plain}.gz`) ? plain : `${plain}.gz`;
}

/** Loads every domain listed in `dir/index.json` (or only `only`, when given). */
export function readFixtureTraces(dir: string, only?: readonly string[]): TraceSet {
  const indexFile = join(dir, 'index.json');
  let index: Record<string, unknown>;
  try {
    index = JSON.parse(readFileSync(indexFile, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ResidencyError('BAD_TRACE', `${indexFile}: cannot read the trace index (${(err as Error).message})`, { cause: err });
  }
  const layers = field(index, 'layers', indexFile, isPosInt, 'a positive integer');
  const topK = field(index, 'top_k', indexFile, isPosInt, 'a positive integer');
  const experts = field(index, 'experts', indexFile, isPosInt, 'a positive integer');
  if (index.dtype !== undefined && index.dtype !== 'uint8') {
    throw new ResidencyError('BAD_TRACE', `${indexFile}: field 'dtype' must be "uint8", got ${JSON.stringify(index.dtype)}`);
  }
  const domains = field(index, 'domains', indexFile, (v): v is Record<string, IndexDomain> => typeof v === 'object' && v !== null, 'an object');
  const names = only ?? Object.keys(domains);
  const traces: RoutingTrace[] = [];
  for (const name of names) {
    const d = domains[name];
    if (!d) throw new ResidencyError('BAD_TRACE', `${indexFile}: no domain '${name}' (have: ${Object.keys(domains).join(', ')})`);
    const where = `${indexFile} domains.${name}`;
    const tokens = field(d as unknown as Record<string, unknown>, 'tokens', where, isPosInt, 'a positive integer');
    const docStarts = field(d as unknown as Record<string, unknown>, 'doc_starts', where,
      (v): v is number[] => Array.isArray(v) && v.every((x) => Number.isInteger(x)), 'an array of integers');
    const bin = traceFile(dir, name);
    let bytes: Buffer;
    try {
      bytes = readFileUnzipped(bin);
    } catch (err) {
      throw new ResidencyError('BAD_TRACE', `${bin}: cannot read (${(err as Error).message})`, { cause: err });
    }
    if (bytes.length !== tokens * layers * topK) {
      throw new ResidencyError('BAD_TRACE', `${bin}: ${bytes.length} bytes, expected tokens ${tokens} x layers ${layers} x top_k ${topK} = ${tokens * layers * topK}`);
    }
    traces.push(validateTrace({ name, layers, experts, topK, tokens, ids: Uint16Array.from(bytes), docStarts }, bin));
  }
  return traceSet(traces, dir);
}
