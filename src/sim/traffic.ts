// Traffic protocols: phases of domain mixes, concurrent users, each user walking its own document.
import { ResidencyError } from '../errors.ts';
import { mulberry32, shuffled } from './rng.ts';
import { documents, rowSize, type RoutingTrace, type TraceSet } from './traces/trace.ts';

/** A stretch of traffic: documents from `domains`, taken in turn (request i comes from domains[i % n]). */
export interface Phase {
  readonly domains: readonly string[];
  readonly steps: number;
}

export interface TrafficOptions {
  readonly phases: readonly Phase[];
  /** Concurrent users: each step carries one token from each user. */
  readonly users: number;
  /** Seeds the document order within each domain. */
  readonly seed: number;
  /** Steps of more tokens than this are not counted (design: decode steps <= 256 tokens counted). */
  readonly countTmax: number;
}

/** One engine step as the simulator replays it. */
export interface SimStep {
  readonly index: number;
  readonly phase: number;
  readonly tokens: number;
  readonly counted: boolean;
  /** [tokens][layers][topK] expert ids, users in order. */
  readonly picks: Uint16Array;
}

/**
 * Parses "en+code_js:3000,de+ja:3000". A name that is not a trace but prefixes some (`code` ->
 * code_js, code_py) stands for all of them, so "en+code" is English plus both code domains.
 */
export function parsePhases(spec: string, set: TraceSet): Phase[] {
  const phases: Phase[] = [];
  for (const part of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^([^:]+):(\d+)$/.exec(part);
    if (!m) throw new ResidencyError('BAD_ARGUMENT', `--phases: '${part}' must look like 'en+code_js:3000' (domains joined by +, then :steps)`);
    const domains: string[] = [];
    for (const name of m[1]!.split('+').map((s) => s.trim())) {
      if (set.traces.has(name)) { domains.push(name); continue; }
      const group = [...set.traces.keys()].filter((k) => k.startsWith(`${name}_`)).sort();
      if (group.length === 0) throw new ResidencyError('BAD_ARGUMENT', `--phases: no trace '${name}' (have: ${[...set.traces.keys()].join(', ')})`);
      domains.push(...group);
    }
    const steps = Number(m[2]);
    if (steps < 1) throw new ResidencyError('BAD_ARGUMENT', `--phases: '${part}' needs at least 1 step`);
    phases.push({ domains, steps });
  }
  if (phases.length === 0) throw new ResidencyError('BAD_ARGUMENT', '--phases: empty');
  return phases;
}

interface Cursor { trace: RoutingTrace; row: number; end: number }

/**
 * Builds the step stream. Documents of each domain are shuffled once (seeded) and walked cyclically
 * across phases, so a domain coming back continues with documents not yet seen where possible. At a
 * phase boundary every user drops its document and starts one from the new mix: that is the shift.
 */
export function buildTraffic(set: TraceSet, opts: TrafficOptions): SimStep[] {
  if (!Number.isInteger(opts.users) || opts.users < 1) throw new ResidencyError('BAD_ARGUMENT', `--users must be a positive integer, got ${opts.users}`);
  const rand = mulberry32(opts.seed);
  const order = new Map<string, Array<[number, number]>>();
  const next = new Map<string, number>();
  for (const [name, t] of [...set.traces].sort(([a], [b]) => (a < b ? -1 : 1))) {
    order.set(name, shuffled(documents(t), rand));
    next.set(name, 0);
  }
  const row = rowSize(set);
  const steps: SimStep[] = [];
  for (let p = 0; p < opts.phases.length; p++) {
    const phase = opts.phases[p]!;
    let request = 0;
    const takeDocument = (): Cursor => {
      const name = phase.domains[request++ % phase.domains.length]!;
      const docs = order.get(name)!;
      const i = next.get(name)!;
      next.set(name, i + 1);
      const [start, end] = docs[i % docs.length]!;
      return { trace: set.traces.get(name)!, row: start, end };
    };
    const users: Cursor[] = [];
    for (let u = 0; u < opts.users; u++) users.push(takeDocument());
    for (let s = 0; s < phase.steps; s++) {
      const picks = new Uint16Array(opts.users * row);
      for (let u = 0; u < opts.users; u++) {
        if (users[u]!.row >= users[u]!.end) users[u] = takeDocument();
        const c = users[u]!;
        picks.set(c.trace.ids.subarray(c.row * row, (c.row + 1) * row), u * row);
        c.row++;
      }
      steps.push({ index: steps.length, phase: p, tokens: opts.users, counted: opts.users <= opts.countTmax, picks });
    }
  }
  return steps;
}

/**
 * Splits a trace's documents into a first and a second half (by document, in file order), for held-out
 * experiments: fit on one half, score on the other. Consecutive documents can be pieces of one source
 * text, so halves are contiguous rather than alternating.
 */
export function splitDocuments(t: RoutingTrace, half: 'first' | 'second'): RoutingTrace {
  const docs = documents(t);
  const cut = Math.floor(docs.length / 2);
  const mine = half === 'first' ? docs.slice(0, cut) : docs.slice(cut);
  if (mine.length === 0) throw new ResidencyError('BAD_TRACE', `trace '${t.name}' has too few documents (${docs.length}) to split`);
  const row = rowSize(t);
  const start = mine[0]![0];
  const end = mine[mine.length - 1]![1];
  return {
    name: t.name, layers: t.layers, experts: t.experts, topK: t.topK, tokens: end - start,
    ids: t.ids.slice(start * row, end * row),
    docStarts: mine.map(([s]) => s - start),
  };
}

/**
 * The steps of a trace recorded by the engine, exactly as they ran (tokens in chunk order), as one phase.
 * Recorded prefill steps are included; whether they count is the count_tmax rule, as in the engine.
 */
export function recordedSteps(t: RoutingTrace, countTmax: number): SimStep[] {
  if (!t.recorded) throw new ResidencyError('BAD_TRACE', `trace '${t.name}' has no recorded steps (lines without 'step'); use --phases to build traffic`);
  const { step, line } = t.recorded;
  const rows = Array.from({ length: t.tokens }, (_, r) => r).sort((a, b) => line[a]! - line[b]!);
  const row = rowSize(t);
  const out: SimStep[] = [];
  let i = 0;
  while (i < rows.length) {
    let j = i;
    while (j < rows.length && step[rows[j]!] === step[rows[i]!]) j++;
    const picks = new Uint16Array((j - i) * row);
    for (let k = i; k < j; k++) picks.set(t.ids.subarray(rows[k]! * row, (rows[k]! + 1) * row), (k - i) * row);
    out.push({ index: out.length, phase: 0, tokens: j - i, counted: j - i <= countTmax, picks });
    i = j;
  }
  return out;
}
