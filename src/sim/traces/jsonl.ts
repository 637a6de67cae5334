// The JSONL trace layout, which is also what the engine records (`generate --record-trace FILE`).
//
// Line 1 (header, optional for hand-written files):
//   {"format":"routing-trace","version":1,"layers":6,"experts":64,"top_k":6}
// Then one line per token:
//   {"layers":[[e0,...,e5], ... one array per layer]}            minimal form
//   {"step":12,"seq":3,"pos":17,"layers":[[...],...]}           as recorded by the engine
// `seq` groups tokens into documents (a request's tokens, in order of appearance); a line with
// `"doc":true` starts a new document in files without `seq`. `step` (the engine step the token ran in)
// lets the simulator replay the recorded steps exactly; without it traffic protocols build steps. Blank
// lines are skipped.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import { validateTrace, type RoutingTrace } from './trace.ts';

export const TRACE_FORMAT = 'routing-trace';

export interface TraceHeader {
  readonly format: typeof TRACE_FORMAT;
  readonly version: 1;
  readonly layers: number;
  readonly experts: number;
  readonly top_k: number;
  /** Free text: model name, command line. */
  readonly source?: string;
}

/** Parses JSONL trace text. `experts` is needed when the file has no header (ids are range-checked against it). */
export function parseJsonlTrace(text: string, file: string, opts: { name?: string; experts?: number } = {}): RoutingTrace {
  const lines = text.split('\n');
  let header: TraceHeader | undefined;
  let layers = 0;
  let topK = 0;
  // Rows grouped by document, in order of first appearance.
  const docs = new Map<string, Array<{ ids: number[]; step: number; line: number }>>();
  let withStep = 0;
  let lineNo = 0;
  let anonDoc = 0;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    const where = `${file}:${i + 1}`;
    let obj: Record<string, unknown>;
    try {
      obj = JSON.parse(line) as Record<string, unknown>;
    } catch (err) {
      throw new ResidencyError('BAD_TRACE', `${where}: not JSON (${(err as Error).message})`);
    }
    if (obj.format !== undefined) {
      if (obj.format !== TRACE_FORMAT || obj.version !== 1) {
        throw new ResidencyError('BAD_TRACE', `${where}: header must have format "${TRACE_FORMAT}" and version 1, got ${JSON.stringify(obj.format)} v${JSON.stringify(obj.version)}`);
      }
      if (header || docs.size > 0) throw new ResidencyError('BAD_TRACE', `${where}: the header must be the first line`);
      for (const k of ['layers', 'experts', 'top_k'] as const) {
        if (!Number.isInteger(obj[k]) || (obj[k] as number) < 1) throw new ResidencyError('BAD_TRACE', `${where}: header field '${k}' must be a positive integer, got ${JSON.stringify(obj[k])}`);
      }
      header = obj as unknown as TraceHeader;
      layers = header.layers;
      topK = header.top_k;
      continue;
    }
    const ls = obj.layers;
    if (!Array.isArray(ls) || ls.length === 0) throw new ResidencyError('BAD_TRACE', `${where}: field 'layers' must be a non-empty array of per-layer id arrays`);
    if (layers === 0) layers = ls.length;
    if (ls.length !== layers) throw new ResidencyError('BAD_TRACE', `${where}: field 'layers' has ${ls.length} entries, expected ${layers}`);
    const flat: number[] = [];
    for (let l = 0; l < ls.length; l++) {
      const picks = ls[l];
      if (!Array.isArray(picks)) throw new ResidencyError('BAD_TRACE', `${where}: layers[${l}] must be an array of expert ids`);
      if (topK === 0) topK = picks.length;
      if (picks.length !== topK) throw new ResidencyError('BAD_TRACE', `${where}: layers[${l}] has ${picks.length} ids, expected top_k ${topK}`);
      for (const id of picks) {
        if (!Number.isInteger(id) || id < 0 || id > 0xffff) throw new ResidencyError('BAD_TRACE', `${where}: layers[${l}] holds ${JSON.stringify(id)}, expected an expert id (integer >= 0)`);
        flat.push(id);
      }
    }
    if (obj.step !== undefined) {
      if (!Number.isInteger(obj.step) || (obj.step as number) < 0) throw new ResidencyError('BAD_TRACE', `${where}: field 'step' must be an integer >= 0`);
      withStep++;
    }
    let key: string;
    if (obj.seq !== undefined) {
      if (!Number.isInteger(obj.seq)) throw new ResidencyError('BAD_TRACE', `${where}: field 'seq' must be an integer`);
      key = `s${obj.seq}`;
    } else {
      if (obj.doc === true && (docs.get(`d${anonDoc}`)?.length ?? 0) > 0) anonDoc++;
      key = `d${anonDoc}`;
    }
    let rows = docs.get(key);
    if (!rows) docs.set(key, (rows = []));
    rows.push({ ids: flat, step: (obj.step as number | undefined) ?? -1, line: lineNo++ });
  }
  const experts = header?.experts ?? opts.experts;
  if (experts === undefined) throw new ResidencyError('BAD_TRACE', `${file}: no header line and no expert count given; add {"format":"${TRACE_FORMAT}","version":1,"layers":..,"experts":..,"top_k":..} as line 1`);
  if (docs.size === 0) throw new ResidencyError('BAD_TRACE', `${file}: no token lines`);
  const allRows = [...docs.values()];
  const tokens = allRows.reduce((n, d) => n + d.length, 0);
  if (withStep !== 0 && withStep !== tokens) throw new ResidencyError('BAD_TRACE', `${file}: ${withStep} of ${tokens} token lines carry 'step': all or none must`);
  const ids = new Uint16Array(tokens * layers * topK);
  const step = new Int32Array(tokens);
  const line = new Int32Array(tokens);
  const docStarts: number[] = [];
  let r = 0;
  for (const doc of allRows) {
    docStarts.push(r);
    for (const row of doc) { step[r] = row.step; line[r] = row.line; ids.set(row.ids, r++ * layers * topK); }
  }
  const name = opts.name ?? basename(file).replace(/\.jsonl$/, '');
  return validateTrace({ name, layers, experts, topK, tokens, ids, docStarts, ...(withStep ? { recorded: { step, line } } : {}) }, file);
}

export function readJsonlTrace(file: string, opts: { name?: string; experts?: number } = {}): RoutingTrace {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ResidencyError('BAD_TRACE', `${file}: cannot read (${(err as Error).message})`, { cause: err });
  }
  return parseJsonlTrace(text, file, opts);
}
