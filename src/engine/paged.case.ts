// The paged-cache conformance suite: what every backend with a KV pool (kvCache) guarantees, written against the
// Backend contract only, so the CUDA backend runs it as the CPU backend does. A backend's test file calls
// runPagedConformance with a factory taking the pool's shape.
//   - where blocks are never changes a result: scattered tables give the logits of contiguous ones, bit for bit;
//     other block sizes the same tokens (logits bit for bit where `exact`);
//   - a sequence spanning many blocks, prefilled in pieces, decodes as one prefilled whole;
//   - blocks given back and reused (a request cancelled mid-block) leak nothing into their next sequence;
//   - a preempted sequence recomputed into other blocks goes on with the same tokens;
//   - a prefix hit (a sequence reading another's full blocks, computing only its new tokens) gives what computing
//     it all gives, and a copy of a shared last block (copyBlocks) recomputed into leaves the original whole;
//   - through the engine: the same tokens with prefix caching on and off, in a pool small enough to preempt.
// Each for every KV dtype given (what a hit reuses is what a recompute writes, in that dtype).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend, KvCacheDtype, SequenceChunk } from '../backend/backend.ts';
import { argmax } from '../backend/argmax.ts';
import { createEngine } from './engine.ts';
import { runToCompletion } from './complete.ts';
import { mulberry32 } from '../util/rng.ts';

/** The pool a backend is made with. */
export interface PoolShape {
  readonly blockSize: number;
  readonly blocks: number;
  readonly dtype: KvCacheDtype;
}

export type PagedFactory = (pool: PoolShape) => Promise<Backend>;

export interface PagedConformanceOptions {
  /** Prompts (token ids) of the sequences decoded together: lengths that cross block boundaries. */
  readonly prompts: readonly (readonly number[])[];
  readonly steps: number;
  /** KV dtypes to run every test in (default float32 only). */
  readonly dtypes?: readonly KvCacheDtype[];
  /**
   * Logits equal bit for bit however a sequence's positions were computed (chunked, batched, recomputed) and
   * whatever the block size (the CPU spec); else the same greedy tokens and logits within `tolerance`.
   */
  readonly exact: boolean;
  readonly tolerance?: number;
}

const BS = 4;
const POOL = 96;

interface Seq {
  readonly prompt: readonly number[];
  readonly table: number[];
}

interface Decoded {
  tokens: number[][];
  /** Per step, per sequence: the logits that chose the token. */
  logits: Float32Array[][];
}

/** Greedy decode of every sequence together: prefill in pieces of `piece` tokens (Infinity: whole), then `steps` tokens. */
function decode(be: Backend, seqs: readonly Seq[], steps: number, piece = Infinity): Decoded {
  const V = be.spec.vocabSize;
  const out: Decoded = { tokens: seqs.map(() => []), logits: [] };
  const chunk = (i: number, tokens: readonly number[], startPos: number): SequenceChunk => ({ seq: i, tokens, startPos, blockTable: seqs[i]!.table });
  const longest = Math.max(...seqs.map((s) => s.prompt.length));
  out.logits.push([]);
  for (let at = 0; at < longest; at += Math.min(piece, longest)) {
    const chunks: SequenceChunk[] = [];
    seqs.forEach((s, i) => {
      if (at < s.prompt.length) chunks.push(chunk(i, s.prompt.slice(at, Math.min(at + piece, s.prompt.length)), at));
    });
    const o = be.forward({ chunks, count: false });
    // Each sequence's first logits come from the step that fed its last prompt token.
    chunks.forEach((c, k) => {
      if (c.startPos + c.tokens.length === seqs[c.seq]!.prompt.length) out.logits[0]![c.seq] = o.logits.slice(k * V, (k + 1) * V);
    });
  }
  for (let s = 0; s < steps; s++) {
    const lg = out.logits[s]!;
    seqs.forEach((_, i) => out.tokens[i]!.push(argmax(lg[i]!, 0, V)));
    if (s === steps - 1) break;
    const o = be.forward({ chunks: seqs.map((q, i) => chunk(i, [out.tokens[i]![s]!], q.prompt.length + s)), count: false });
    out.logits.push(seqs.map((_, i) => o.logits.slice(i * V, (i + 1) * V)));
  }
  return out;
}

/** Blocks for `n` positions from `pool`, taken in order (the caller shapes the order). */
function take(pool: number[], n: number): number[] {
  return pool.splice(0, Math.ceil(n / BS));
}

function same(a: Decoded, b: Decoded, o: PagedConformanceOptions, what: string): void {
  assert.deepEqual(a.tokens, b.tokens, `${what}: greedy tokens`);
  let worst = 0;
  a.logits.forEach((step, s) => step.forEach((lg, i) => {
    const ref = b.logits[s]![i]!;
    for (let j = 0; j < lg.length; j++) worst = Math.max(worst, Math.abs(lg[j]! - ref[j]!));
  }));
  if (o.exact) assert.equal(worst, 0, `${what}: logits bit for bit`);
  else assert.ok(worst <= (o.tolerance ?? 1e-3), `${what}: logits within ${o.tolerance ?? 1e-3} (worst ${worst})`);
}

export function runPagedConformance(name: string, make: PagedFactory, o: PagedConformanceOptions): void {
  for (const dtype of o.dtypes ?? ['float32']) {
    const pool = (blockSize = BS, blocks = POOL): PoolShape => ({ blockSize, blocks, dtype });
    const lengths = o.prompts.map((p) => p.length + o.steps);
    const contiguous = (): Seq[] => {
      const free = Array.from({ length: POOL }, (_, b) => b);
      return o.prompts.map((p, i) => ({ prompt: p, table: take(free, lengths[i]!) }));
    };
    const label = `paged conformance, ${name}, ${dtype} KV`;

    test(`${label}: where the blocks are never changes a result; another block size gives the same tokens`, async () => {
      const be = await make(pool());
      try {
        assert.ok(be.kvCache, 'the backend reports its pool');
        assert.equal(be.kvCache.blockSize, BS);
        assert.equal(be.kvCache.numBlocks, POOL);
        assert.equal(be.kvCache.dtype, dtype);
        const ref = decode(be, contiguous(), o.steps);
        const rand = mulberry32(3);
        const free = Array.from({ length: POOL }, (_, b) => b).sort(() => rand() - 0.5);
        const scattered = o.prompts.map((p, i) => ({ prompt: p, table: take(free, lengths[i]!) }));
        const got = decode(be, scattered, o.steps);
        same(got, ref, { ...o, exact: true }, 'scattered blocks');
        const big = await make(pool(64, 8));
        try {
          same(decode(big, o.prompts.map((p, i) => ({ prompt: p, table: [i] })), o.steps), ref, o, 'blocks of 64');
        } finally {
          big.dispose();
        }
      } finally {
        be.dispose();
      }
    });

    test(`${label}: a sequence over many blocks, prefilled in pieces, decodes as one prefilled whole`, async () => {
      const be = await make(pool());
      try {
        const flat = o.prompts.flat();
        const long = Array.from({ length: 70 }, (_, i) => flat[i % flat.length]!);
        const seqs = (): Seq[] => [{ prompt: long, table: Array.from({ length: 30 }, (_, b) => 29 - b) }];
        const whole = decode(be, seqs(), 24);
        same(decode(be, seqs(), 24, 5), whole, o, 'prefilled 5 tokens a step');
        same(decode(be, seqs(), 24, 1), whole, o, 'prefilled token by token');
      } finally {
        be.dispose();
      }
    });

    test(`${label}: blocks given back mid-block (a cancelled request) and taken by another sequence leak nothing into it`, async () => {
      const be = await make(pool());
      const fresh = await make(pool());
      try {
        // A stops after 6 of its tokens (mid-block); B gets A's blocks, in another order, and others.
        const a = { prompt: o.prompts[1]!, table: [5, 9, 2, 40] };
        decode(be, [a], 3);
        const b = { prompt: o.prompts[0]!, table: [2, 5, 9, 11, 12, 13, 14, 15, 16, 17] };
        same(decode(be, [b], o.steps), decode(fresh, [{ prompt: b.prompt, table: [0, 1, 3, 4, 6, 7, 8, 10, 20, 21] }], o.steps), { ...o, exact: true }, 'reused blocks');
      } finally {
        be.dispose();
        fresh.dispose();
      }
    });

    test(`${label}: a preempted sequence recomputed into other blocks goes on with the same tokens`, async () => {
      const be = await make(pool());
      try {
        const V = be.spec.vocabSize;
        const p = o.prompts[2] ?? o.prompts[0]!;
        const ref = decode(be, [{ prompt: p, table: Array.from({ length: 20 }, (_, b) => b) }], o.steps);
        // Decode 5 tokens, drop everything, then recompute prompt + those tokens in one chunk into other blocks.
        const k = 5;
        const first = decode(be, [{ prompt: p, table: Array.from({ length: 20 }, (_, b) => 40 + b) }], k);
        const known = [...p, ...first.tokens[0]!];
        const table = Array.from({ length: 20 }, (_, b) => 90 - b * 3);
        const again = be.forward({ chunks: [{ seq: 0, tokens: known, startPos: 0, blockTable: table }], count: false });
        const got: Decoded = { tokens: [[...first.tokens[0]!]], logits: first.logits.map((l) => l) };
        got.logits.push([again.logits.slice(0, V)]);
        for (let s = k; s < o.steps; s++) {
          const t = argmax(got.logits[s]![0]!, 0, V);
          got.tokens[0]!.push(t);
          if (s === o.steps - 1) break;
          const out = be.forward({ chunks: [{ seq: 0, tokens: [t], startPos: p.length + s, blockTable: table }], count: false });
          got.logits.push([out.logits.slice(0, V)]);
        }
        same(got, ref, o, 'recomputed after preemption');
      } finally {
        be.dispose();
      }
    });

    test(`${label}: a prefix hit computes only the new tokens and gives what computing them all gives; a copied last block leaves the original whole`, async () => {
      const be = await make(pool());
      const fresh = await make(pool());
      try {
        assert.ok(be.copyBlocks, 'a paged backend copies blocks');
        const V = be.spec.vocabSize;
        const p = Array.from({ length: 12 }, (_, i) => o.prompts[0]![i % o.prompts[0]!.length]! + i);
        // A: the 12-token prompt (3 full blocks) and 6 tokens more.
        const aTable = [7, 3, 11, 30, 31];
        const aRef = decode(fresh, [{ prompt: p, table: [0, 1, 2, 3, 4] }], 6);
        const aFirst = decode(be, [{ prompt: p, table: aTable }], 3);
        // B: A's first two blocks and its own 4 tokens: computed from position 8 on, reading A's blocks.
        const q = [...p.slice(0, 8), 1, 2, 3, 4, 5];
        const bTable = [7, 3, 50, 51];
        const hit = be.forward({ chunks: [{ seq: 1, tokens: q.slice(8), startPos: 8, blockTable: bTable }], count: false }).logits.slice(0, V);
        const bRef = decode(fresh, [{ prompt: q, table: [60, 61, 62, 63] }], 1).logits[0]![0]!;
        same({ tokens: [], logits: [[hit]] }, { tokens: [], logits: [[bRef]] }, o, 'prefix hit');
        // C: A's whole prompt (block-aligned, all cached): A's block 2 copied to its own, the last token computed there.
        be.copyBlocks!([[11, 70]]);
        const c = be.forward({ chunks: [{ seq: 2, tokens: [p[11]!], startPos: 11, blockTable: [7, 3, 70] }], count: false }).logits.slice(0, V);
        same({ tokens: [], logits: [[c]] }, { tokens: [], logits: [[aRef.logits[0]![0]!]] }, o, 'the last token recomputed into a copy');
        // A goes on: its blocks were only read (and one copied).
        const rest: Decoded = { tokens: [[...aFirst.tokens[0]!]], logits: [...aFirst.logits] };
        for (let s = 2; s < 5; s++) {
          const out = be.forward({ chunks: [{ seq: 0, tokens: [rest.tokens[0]![s]!], startPos: p.length + s, blockTable: aTable }], count: false });
          rest.logits.push([out.logits.slice(0, V)]);
          rest.tokens[0]!.push(argmax(out.logits, 0, V));
        }
        same(rest, aRef, o, 'the sequence whose blocks were shared and copied');
      } finally {
        be.dispose();
        fresh.dispose();
      }
    });

    test(`${label}: through the engine, the same tokens with prefix caching on and off, in a pool that preempts`, async () => {
      const shared = o.prompts[0]!.length >= 8 ? o.prompts[0]! : [...o.prompts[0]!, ...o.prompts[1]!];
      const prompts = [...o.prompts, [...shared, 5], [...shared, 6, 7], shared.slice(0, 8), shared.slice(0, 8)];
      const reqs = prompts.map((p, i) => ({ id: `r${i}`, promptIds: [...p], sampling: { temperature: 0, topP: 1, maxTokens: 6 + (i % 5), ignoreEos: true } }));
      const runs: Map<string, number[]>[] = [];
      for (const [caching, blocks] of [[false, POOL], [true, POOL], [true, 12]] as const) {
        const be = await make(pool(BS, blocks));
        try {
          const engine = createEngine(be, { prefixCaching: caching, scheduler: { maxRunning: 4, maxStepTokens: 16 } });
          const got = await runToCompletion(engine, reqs);
          runs.push(new Map([...got].map(([id, c]) => [id, c.tokens])));
          const kv = engine.kvCache!;
          assert.equal(kv.freeBlocks, blocks, 'every block free at the end');
          if (caching) assert.ok(kv.prefixHits > 0, 'prefix hits');
          if (blocks === 12) assert.ok(kv.preemptions > 0, 'preempted');
          await engine.close();
        } finally {
          be.dispose();
        }
      }
      assert.deepEqual(runs[1], runs[0], 'prefix caching on: the same tokens');
      assert.deepEqual(runs[2], runs[0], 'preempting: the same tokens');
    });
  }
}
