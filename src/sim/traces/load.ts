// Loads traces from a path: a fixture directory (index.json + .bin or .bin.gz), a directory of .jsonl files, or one .jsonl file.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import { isFixtureDir, readFixtureTraces } from './fixture.ts';
import { readJsonlTrace } from './jsonl.ts';
import { traceSet, type TraceSet } from './trace.ts';

export function loadTraces(path: string, opts: { only?: readonly string[]; experts?: number } = {}): TraceSet {
  let st;
  try {
    st = statSync(path);
  } catch {
    throw new ResidencyError('BAD_TRACE', `--traces ${path}: no such file or directory`);
  }
  if (st.isFile()) return traceSet([readJsonlTrace(path, { experts: opts.experts })], path);
  if (isFixtureDir(path)) return readFixtureTraces(path, opts.only);
  const files = readdirSync(path).filter((f) => f.endsWith('.jsonl')).sort();
  if (files.length === 0) throw new ResidencyError('BAD_TRACE', `--traces ${path}: neither index.json (fixture layout) nor *.jsonl files found`);
  const traces = files.map((f) => readJsonlTrace(join(path, f), { experts: opts.experts }))
    .filter((t) => !opts.only || opts.only.includes(t.name));
  return traceSet(traces, path);
}

/** The tiny-moe fixture's traces, relative to the repository root (tests and benches run from there). */
export const FIXTURE_TRACES = 'fixtures/tiny-moe/traces';
