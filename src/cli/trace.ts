// `residency trace`: record the routing of a user's own text, teacher-forced, as a JSONL routing trace the
// simulator replays. Made the way the fixture's traces were (recipe/refs.py): each document runs through
// the model as one sequence, and every token's top-k expert ids per layer become one trace row.
import { resolve, join } from 'node:path';
import type { ParseArgsConfig } from 'node:util';
import { ResidencyError } from '../errors.ts';
import { readFileUnzipped } from '../util/gzip-file.ts';
import { createBackend, parseBackendName, parseThreads, type BackendName } from '../backend/registry.ts';
import type { LoadedModel } from '../model/load.ts';
import { loadModelFor } from '../backend/load-for.ts';
import { moeLayerCount } from '../model/spec.ts';
import { progressLine } from '../model/progress.ts';
import { openTraceFile } from '../sim/traces/recorder.ts';
import type { CliCommand } from './command.ts';
import { packageRoot, parseFlags } from './generate.ts';
import { DirectSequences } from '../backend/sequences.ts';

export const TRACE_HELP = `usage: residency trace [--model DIR] (--text FILE... | --jsonl FILE [--field text] | --prompts FILE.json --domain NAME) --out TRACE.jsonl [options]

Records the routing of your own text, teacher-forced (each token's row is what a decode step of batch 1
picks for it), as a JSONL routing trace: one row per token, one document per 'seq', one token per 'step'.

  --model DIR              checkpoint folder (default: models/tiny-moe in the package)
  --text FILE              a plain-text file; the whole file is ONE document (repeat --text for more)
  --jsonl FILE             one JSON object per line; each object's --field string is one document
  --field NAME             the text field of --jsonl objects (default text)
  --prompts FILE.json      the fixture's prompts.json layout {domain: [documents]} (in a checkout:
                           fixtures/tiny-moe/prompts.json.gz; any of these files may be gzipped) ...
  --domain NAME            ... and the domain whose documents to trace
  --out TRACE.jsonl        where the trace goes (overwritten)
  --max-docs N             trace at most N documents (empty ones do not count)
  --max-tokens-per-doc N   truncate each document to N tokens (always to the model's max positions)
  --threads N|auto         cpu: worker threads sharing each step (bit-identical; default RESIDENCY_CPU_THREADS, else 1)
  --backend NAME           cpu (default) or cuda

Texts are encoded with the checkpoint's tokenizer, no special tokens added; documents that encode to no
tokens are skipped. Replay the trace step for step (documents one after another, one token per step):
  residency simulate --traces TRACE.jsonl --phases recorded
or as traffic, the trace's name being the file name without .jsonl (here TRACE):
  residency simulate --traces TRACE.jsonl --phases TRACE:3000 --users 4`;

const TRACE_OPTIONS = {
  model: { type: 'string' },
  text: { type: 'string', multiple: true },
  jsonl: { type: 'string' },
  field: { type: 'string' },
  prompts: { type: 'string' },
  domain: { type: 'string' },
  out: { type: 'string' },
  'max-docs': { type: 'string' },
  'max-tokens-per-doc': { type: 'string' },
  threads: { type: 'string' },
  backend: { type: 'string', default: 'cpu' },
  help: { type: 'boolean', short: 'h', default: false },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

/** Prefill chunk size: a document's tokens go through the model at most this many per step. */
export const TRACE_CHUNK = 256;

/** Where the documents come from (exactly one source). */
export type TraceSource =
  | { readonly kind: 'text'; readonly files: readonly string[] }
  | { readonly kind: 'jsonl'; readonly file: string; readonly field: string }
  | { readonly kind: 'prompts'; readonly file: string; readonly domain: string };

export interface TraceOptions {
  readonly modelDir: string;
  readonly source: TraceSource;
  readonly out: string;
  readonly maxDocs?: number;
  readonly maxTokensPerDoc?: number;
  readonly threads?: number | 'auto';
  readonly backend?: BackendName;
}

export interface TraceSummary {
  readonly documents: number;
  readonly tokens: number;
  /** Documents that encoded to no tokens. */
  readonly skippedEmpty: number;
  /** Documents cut to the token limit. */
  readonly truncated: number;
  readonly seconds: number;
  readonly out: string;
}

function positiveInt(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < 1) throw new ResidencyError('BAD_ARGUMENT', `--${flag} '${text}': expected an integer >= 1`);
  return n;
}

type TraceValues = ReturnType<typeof parseFlags<typeof TRACE_OPTIONS>>;

/** Checks the flags (exactly one source, --out given, numbers in range); throws BAD_ARGUMENT naming the flag. */
export function traceOptionsFrom(v: TraceValues): TraceOptions {
  const given = (['text', 'jsonl', 'prompts'] as const).filter((k) => v[k] !== undefined);
  if (given.length !== 1) {
    throw new ResidencyError('BAD_ARGUMENT', `give exactly one of --text FILE, --jsonl FILE or --prompts FILE.json (got ${given.length === 0 ? 'none' : given.map((k) => `--${k}`).join(' and ')})\n\n${TRACE_HELP}`);
  }
  if (v.field !== undefined && v.jsonl === undefined) throw new ResidencyError('BAD_ARGUMENT', '--field only applies to --jsonl');
  if (v.domain !== undefined && v.prompts === undefined) throw new ResidencyError('BAD_ARGUMENT', '--domain only applies to --prompts');
  if (v.prompts !== undefined && v.domain === undefined) throw new ResidencyError('BAD_ARGUMENT', '--prompts needs --domain NAME (which domain\'s documents to trace)');
  if (v.out === undefined || v.out.trim() === '') throw new ResidencyError('BAD_ARGUMENT', `--out TRACE.jsonl is required\n\n${TRACE_HELP}`);
  if (v.field !== undefined && v.field.trim() === '') throw new ResidencyError('BAD_ARGUMENT', '--field: expected a field name');
  const source: TraceSource = v.text !== undefined ? { kind: 'text', files: v.text }
    : v.jsonl !== undefined ? { kind: 'jsonl', file: v.jsonl, field: v.field ?? 'text' }
    : { kind: 'prompts', file: v.prompts!, domain: v.domain! };
  return {
    modelDir: resolve(v.model ?? join(packageRoot(), 'models/tiny-moe')),
    source,
    out: v.out,
    maxDocs: positiveInt('max-docs', v['max-docs']),
    maxTokensPerDoc: positiveInt('max-tokens-per-doc', v['max-tokens-per-doc']),
    threads: v.threads === undefined ? undefined : parseThreads(v.threads),
    backend: parseBackendName(v.backend ?? 'cpu'),
  };
}

function readText(flag: string, file: string): string {
  try {
    return readFileUnzipped(file).toString('utf8');
  } catch (err) {
    throw new ResidencyError('BAD_ARGUMENT', `--${flag} ${file}: cannot read (${(err as Error).message})`, { cause: err });
  }
}

/** The documents of a source, in order (empty ones included: the caller skips what encodes to nothing). */
export function readDocuments(source: TraceSource): string[] {
  if (source.kind === 'text') return source.files.map((f) => readText('text', f));
  if (source.kind === 'jsonl') {
    const docs: string[] = [];
    readText('jsonl', source.file).split('\n').forEach((raw, i) => {
      const line = raw.trim();
      if (line === '') return;
      const where = `${source.file}:${i + 1}`;
      let obj: unknown;
      try {
        obj = JSON.parse(line);
      } catch (err) {
        throw new ResidencyError('BAD_ARGUMENT', `--jsonl ${where}: not JSON (${(err as Error).message})`);
      }
      if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) throw new ResidencyError('BAD_ARGUMENT', `--jsonl ${where}: expected a JSON object with a '${source.field}' string`);
      const text = (obj as Record<string, unknown>)[source.field];
      if (typeof text !== 'string') {
        throw new ResidencyError('BAD_ARGUMENT', `--jsonl ${where}: field '${source.field}' must be a string, got ${text === undefined ? 'no such field' : JSON.stringify(text).slice(0, 40)} (pick the field with --field)`);
      }
      docs.push(text);
    });
    return docs;
  }
  let obj: unknown;
  try {
    obj = JSON.parse(readText('prompts', source.file));
  } catch (err) {
    if (err instanceof ResidencyError) throw err;
    throw new ResidencyError('BAD_ARGUMENT', `--prompts ${source.file}: not JSON (${(err as Error).message})`);
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) throw new ResidencyError('BAD_ARGUMENT', `--prompts ${source.file}: expected {domain: [documents]}`);
  const domains = obj as Record<string, unknown>;
  const docs = domains[source.domain];
  if (docs === undefined) throw new ResidencyError('BAD_ARGUMENT', `--domain '${source.domain}': not in ${source.file} (it has ${Object.keys(domains).join(', ') || 'no domains'})`);
  if (!Array.isArray(docs) || !docs.every((d) => typeof d === 'string')) {
    throw new ResidencyError('BAD_ARGUMENT', `--prompts ${source.file}: domain '${source.domain}' must be an array of document strings`);
  }
  return docs as string[];
}

/** Runs the documents through the model and writes the trace; prints nothing (see printTraceSummary). */
export async function runTrace(opts: TraceOptions, loaded?: LoadedModel): Promise<TraceSummary> {
  // Inputs are read and checked before the (slow) model load, so a typo fails at once.
  const texts = readDocuments(opts.source);
  let model = loaded;
  if (!model) {
    const progress = progressLine({ label: 'loading' });
    try {
      model = await loadModelFor(opts.modelDir, opts.backend ?? 'cpu', { onProgress: progress.onProgress });
    } finally {
      progress.finish();
    }
  }
  const { spec } = model;
  const limit = Math.min(opts.maxTokensPerDoc ?? Infinity, spec.maxPositions);
  const docs: number[][] = [];
  let skippedEmpty = 0;
  let truncated = 0;
  for (const text of texts) {
    if (opts.maxDocs !== undefined && docs.length >= opts.maxDocs) break;
    const ids = model.tokenizer.encode(text);
    if (ids.length === 0) { skippedEmpty++; continue; }
    if (ids.length > limit) truncated++;
    docs.push(ids.length > limit ? ids.slice(0, limit) : ids);
  }
  if (docs.length === 0) throw new ResidencyError('BAD_ARGUMENT', `no documents to trace: all ${texts.length} encode to no tokens`);

  const backend = await createBackend(opts.backend ?? 'cpu', model, {
    ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
    ...(loaded ? {} : { takeExperts: true }), // loaded here for this backend alone
  });
  let file: ReturnType<typeof openTraceFile> | undefined;
  let tokens = 0;
  let seconds = 0;
  try {
    try {
      file = openTraceFile(opts.out, { layers: moeLayerCount(spec), experts: spec.numExperts, topK: spec.topK }, `residency trace ${spec.name} (teacher-forced)`);
    } catch (err) {
      throw new ResidencyError('BAD_ARGUMENT', `--out ${opts.out}: cannot write (${(err as Error).message})`, { cause: err });
    }
    const row = moeLayerCount(spec) * spec.topK;
    const seqs = new DirectSequences(backend);
    for (let d = 0; d < docs.length; d++) {
      const ids = docs[d]!;
      // One sequence per document, fed in chunks; count: false because tracing is not traffic.
      seqs.open(d, ids.length);
      try {
        for (let start = 0; start < ids.length; start += TRACE_CHUNK) {
          const chunk = ids.slice(start, start + TRACE_CHUNK);
          const t0 = process.hrtime.bigint();
          const out = seqs.forward({ chunks: [{ seq: d, tokens: chunk, startPos: start }], count: false, recordRouting: true });
          seconds += Number(process.hrtime.bigint() - t0) / 1e9;
          if (!out.routing) throw new ResidencyError('INTERNAL', `backend ${backend.name} returned no routing with recordRouting`);
          // One recorder step per token: the row is what a decode step of batch 1 would pick for it
          // (causal attention), so `--phases recorded` replays the text one token per step, all counted.
          for (let i = 0; i < chunk.length; i++) {
            file.recorder.recordStep([{ seq: d, startPos: start + i, tokens: 1 }], out.routing.subarray(i * row, (i + 1) * row));
          }
        }
      } finally {
        seqs.close(d);
      }
      tokens += ids.length;
    }
  } finally {
    file?.close();
    backend.dispose();
  }
  return { documents: docs.length, tokens, skippedEmpty, truncated, seconds, out: opts.out };
}

export function printTraceSummary(s: TraceSummary): void {
  const rate = s.seconds > 0 ? `${(s.tokens / s.seconds).toFixed(1)} tok/s` : '-';
  process.stderr.write(
    `trace: ${s.documents} documents, ${s.tokens} tokens in ${s.seconds.toFixed(2)} s (${rate})` +
      `${s.skippedEmpty ? `; ${s.skippedEmpty} empty skipped` : ''}${s.truncated ? `; ${s.truncated} truncated` : ''} -> ${s.out}\n`,
  );
}

export const traceCommand: CliCommand = {
  name: 'trace',
  async run(argv) {
    const values = parseFlags(argv, TRACE_OPTIONS, TRACE_HELP);
    if (values.help) {
      console.log(TRACE_HELP);
      return 0;
    }
    printTraceSummary(await runTrace(traceOptionsFrom(values)));
    return 0;
  },
};
