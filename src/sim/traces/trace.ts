// A routing trace: what each token picked, per layer, in memory (one layout for every file format).
import { ResidencyError } from '../../errors.ts';

/**
 * One stream of tokens' routing. `ids` is row-major [tokens][layers][topK]: row t, layer l, choice k is
 * at ((t * layers) + l) * topK + k. `docStarts` are the rows where documents begin (ascending, first 0):
 * traffic generators walk whole documents.
 */
export interface RoutingTrace {
  readonly name: string;
  readonly layers: number;
  readonly experts: number;
  readonly topK: number;
  readonly tokens: number;
  readonly ids: Uint16Array;
  readonly docStarts: readonly number[];
  /**
   * For traces recorded by the engine: per row, the engine step it ran in and its line number in the file,
   * so the exact step structure can be replayed (recordedSteps in traffic.ts).
   */
  readonly recorded?: { readonly step: Int32Array; readonly line: Int32Array };
}

/** A named set of traces with one geometry (the fixture's domains, or the files of a directory). */
export interface TraceSet {
  readonly layers: number;
  readonly experts: number;
  readonly topK: number;
  readonly traces: ReadonlyMap<string, RoutingTrace>;
}

/** Row size in ids. */
export function rowSize(t: { layers: number; topK: number }): number {
  return t.layers * t.topK;
}

/** Document [start, end) rows of trace `t`. */
export function documents(t: RoutingTrace): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let i = 0; i < t.docStarts.length; i++) {
    const end = i + 1 < t.docStarts.length ? t.docStarts[i + 1]! : t.tokens;
    if (end > t.docStarts[i]!) out.push([t.docStarts[i]!, end]);
  }
  return out;
}

/**
 * Checks ids, geometry and document starts; throws BAD_TRACE naming the file, the row and the field.
 * Traces are checked once on load so the replay loop can trust them.
 */
export function validateTrace(t: RoutingTrace, file: string): RoutingTrace {
  for (const [field, v] of [['layers', t.layers], ['experts', t.experts], ['top_k', t.topK]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new ResidencyError('BAD_TRACE', `${file}: ${field} must be a positive integer, got ${v}`);
  }
  if (t.topK > t.experts) throw new ResidencyError('BAD_TRACE', `${file}: top_k ${t.topK} exceeds experts ${t.experts}`);
  if (t.ids.length !== t.tokens * t.layers * t.topK) {
    throw new ResidencyError('BAD_TRACE', `${file}: expected ${t.tokens} rows x ${t.layers} layers x ${t.topK} picks = ${t.tokens * t.layers * t.topK} ids, got ${t.ids.length}`);
  }
  const row = rowSize(t);
  for (let i = 0; i < t.ids.length; i++) {
    if (t.ids[i]! >= t.experts) {
      const r = Math.floor(i / row);
      const l = Math.floor((i % row) / t.topK);
      throw new ResidencyError('BAD_TRACE', `${file}: row ${r} layer ${l}: expert id ${t.ids[i]} out of range 0..${t.experts - 1}`);
    }
  }
  // A token picks distinct experts in a layer; a repeat means a corrupt or mis-shaped file.
  for (let r = 0; r < t.tokens; r++) {
    for (let l = 0; l < t.layers; l++) {
      const base = (r * t.layers + l) * t.topK;
      for (let a = 0; a < t.topK; a++) for (let b = a + 1; b < t.topK; b++) {
        if (t.ids[base + a] === t.ids[base + b]) {
          throw new ResidencyError('BAD_TRACE', `${file}: row ${r} layer ${l}: expert ${t.ids[base + a]} picked twice (top_k picks must be distinct)`);
        }
      }
    }
  }
  const ds = t.docStarts;
  if (ds.length === 0 || ds[0] !== 0) throw new ResidencyError('BAD_TRACE', `${file}: doc_starts must begin with 0`);
  for (let i = 1; i < ds.length; i++) {
    if (!Number.isInteger(ds[i]) || ds[i]! <= ds[i - 1]! || ds[i]! >= Math.max(t.tokens, 1)) {
      throw new ResidencyError('BAD_TRACE', `${file}: doc_starts[${i}] = ${ds[i]} must be an integer, ascending and below tokens (${t.tokens})`);
    }
  }
  return t;
}

/** Builds a TraceSet, checking that every trace has the same geometry. */
export function traceSet(traces: RoutingTrace[], where: string): TraceSet {
  if (traces.length === 0) throw new ResidencyError('BAD_TRACE', `${where}: no traces found`);
  const first = traces[0]!;
  const map = new Map<string, RoutingTrace>();
  for (const t of traces) {
    if (t.layers !== first.layers || t.experts !== first.experts || t.topK !== first.topK) {
      throw new ResidencyError('BAD_TRACE', `${where}: trace '${t.name}' is ${t.layers}x${t.experts} top-${t.topK}, but '${first.name}' is ${first.layers}x${first.experts} top-${first.topK}`);
    }
    if (map.has(t.name)) throw new ResidencyError('BAD_TRACE', `${where}: two traces named '${t.name}'`);
    map.set(t.name, t);
  }
  return { layers: first.layers, experts: first.experts, topK: first.topK, traces: map };
}
