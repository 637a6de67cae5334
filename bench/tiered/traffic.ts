// Real text as decode traffic: users each walk documents of a phase's domains, one token a step (teacher
// forced, so every policy sees exactly the same tokens), routed by the model's own router.
import { readFileUnzipped } from '../../src/util/gzip-file.ts';
import type { SequenceChunk } from '../../src/backend/backend.ts';
import type { Tokenizer } from '../../src/model/tokenizer.ts';

/** Domains of prompts.json; a name that prefixes several ("code") stands for all of them. */
export type Docs = ReadonlyMap<string, readonly (readonly number[])[]>;

export interface Phase {
  readonly name: string;
  readonly domains: readonly string[];
  readonly steps: number;
}

/**
 * Tokenized documents split in two halves per domain: `fit` (what an earlier serving run would have seen:
 * the fixed and seed maps are fitted on it) and `walk` (the benchmark's traffic), so no map is fitted on the
 * very tokens it is scored on.
 */
export function loadDocs(path: string, tok: Tokenizer, maxDocTokens: number): { fit: Docs; walk: Docs } {
  const raw = JSON.parse(readFileUnzipped(path).toString('utf8')) as Record<string, string[]>;
  const fit = new Map<string, number[][]>();
  const walk = new Map<string, number[][]>();
  for (const [domain, texts] of Object.entries(raw)) {
    // Documents longer than the cap are cut into pieces: each piece is a fresh sequence (bounded KV).
    const pieces: number[][] = [];
    for (const t of texts) {
      const ids = tok.encode(t);
      for (let i = 0; i + 16 <= ids.length; i += maxDocTokens) pieces.push(ids.slice(i, i + maxDocTokens));
    }
    const half = Math.floor(pieces.length / 2);
    fit.set(domain, pieces.slice(0, half));
    walk.set(domain, pieces.slice(half));
  }
  return { fit, walk };
}

/** "en+code:3000,de+ja:3000" -> phases (a name prefixing several domains stands for all of them). */
export function parsePhases(spec: string, docs: Docs): Phase[] {
  return spec.split(',').map((part) => {
    const [mix, n] = part.split(':');
    const steps = Number(n);
    if (!mix || !Number.isInteger(steps) || steps < 1) throw new Error(`--phases: '${part}': expected DOMAIN+DOMAIN:STEPS`);
    const domains = mix.split('+').flatMap((d) => {
      const all = [...docs.keys()].filter((k) => k === d || k.startsWith(d));
      if (all.length === 0) throw new Error(`--phases: no domain '${d}' in the prompts (have ${[...docs.keys()].join(', ')})`);
      return all;
    });
    return { name: mix, domains, steps };
  });
}

/**
 * The step stream of `users` users: each walks the documents of the phase's domains (user u starts at
 * domain u, document u; the domains alternate), one token a step, a new sequence per document. A phase
 * change closes every user's sequence: the next step starts the new phase's documents.
 */
export class Walk {
  private readonly at: { domain: number; doc: number }[];
  private readonly cur: { seq: number; tokens: readonly number[]; pos: number }[] = [];
  private nextSeq = 0;
  private phase = -1;
  private domains: readonly string[] = [];

  constructor(private readonly docs: Docs, readonly users: number) {
    this.at = Array.from({ length: users }, (_, u) => ({ domain: u, doc: u }));
  }

  /** The chunks of the next step, and the sequences to close / open before it. */
  next(phase: number, p: Phase): { chunks: SequenceChunk[]; close: number[]; open: { seq: number; capacity: number }[] } {
    const close: number[] = [];
    const open: { seq: number; capacity: number }[] = [];
    if (phase !== this.phase) {
      this.phase = phase;
      this.domains = p.domains;
      for (const c of this.cur) close.push(c.seq);
      this.cur.length = 0;
    }
    const chunks: SequenceChunk[] = [];
    for (let u = 0; u < this.users; u++) {
      let c = this.cur[u];
      if (!c || c.pos >= c.tokens.length) {
        if (c) close.push(c.seq);
        c = { seq: this.nextSeq++, tokens: this.nextDoc(u), pos: 0 };
        this.cur[u] = c;
        open.push({ seq: c.seq, capacity: c.tokens.length + 1 });
      }
      chunks.push({ seq: c.seq, tokens: [c.tokens[c.pos]!], startPos: c.pos });
      c.pos++;
    }
    return { chunks, close, open };
  }

  /** Sequences still open (to close at the end). */
  openSeqs(): number[] {
    return this.cur.map((c) => c.seq);
  }

  private nextDoc(u: number): readonly number[] {
    const a = this.at[u]!;
    const domain = this.domains[a.domain % this.domains.length]!;
    const list = this.docs.get(domain)!;
    const doc = list[a.doc % list.length]!;
    a.domain++;
    if (a.domain % this.domains.length === 0) a.doc++;
    return doc;
  }
}
