// The backend conformance suite: what every backend (every CPU variant in CI, every CUDA path on the device)
// guarantees about counting, placement and moves. A backend's test file calls runBackendConformance with a
// factory; the suite builds what it needs from it.
//   - the counter is the histogram of the routed picks of counted steps, and nothing else;
//   - placement never changes a result: the same logits, bit for bit, at any hot count and map;
//   - background moves land losslessly: logits unchanged while thousands of them land, and moving back to the
//     boot map gives back its digest;
//   - a bad step is refused before anything changes (counter, KV cache: the next good step is unaffected);
//   - argmaxOnly picks as the host's argmax of the logits; on a backend that runs ahead (submit), a step fed the
//     argmax of the step before on the device picks what the same step given those tokens does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FED_TOKEN, type Backend } from './backend.ts';
import { argmax } from './argmax.ts';
import { mapFromBanks } from './bank-map.ts';
import { MovesInFlight } from './moves-in-flight.ts';
import { DirectSequences } from './sequences.ts';
import type { BankPlacement } from './slot-tables.ts';
import { planRestore } from '../residency/restore.ts';
import { mulberry32 } from '../util/rng.ts';

export interface ConformanceOptions {
  /** Hot experts per layer of the tiered variant (< experts). */
  readonly hot: number;
  /** Prompts (token ids) of the sequences decoded together. */
  readonly prompts: readonly (readonly number[])[];
  /** Greedy decode steps per run (more steps: more moves land). */
  readonly steps: number;
  /** Exchanges requested per layer between two steps while moves run (default 2). */
  readonly movesPerLayer?: number;
  /** Minimum moves that must land during the moving run (default 50). */
  readonly minLanded?: number;
}

export type BackendFactory = (placement?: BankPlacement) => Promise<Backend>;

interface Run { tokens: number[][]; logits: Float32Array[]; routing: Int32Array[]; counts: Uint32Array }

/** Greedy decode of every prompt together (teacher forced by `forced` when given); `between` runs between steps. */
function decode(be: Backend, o: ConformanceOptions, between?: () => void, forced?: number[][]): Run {
  const V = be.spec.vocabSize;
  const before = be.readCounter();
  const seqs = new DirectSequences(be);
  o.prompts.forEach((p, i) => seqs.open(i, p.length + o.steps + 1));
  let out = seqs.forward({ chunks: o.prompts.map((p, i) => ({ seq: i, tokens: [...p], startPos: 0 })), count: false, recordRouting: true });
  const run: Run = { tokens: o.prompts.map(() => []), logits: [], routing: [], counts: new Uint32Array(0) };
  for (let s = 0; s < o.steps; s++) {
    run.logits.push(out.logits);
    o.prompts.forEach((_, i) => {
      run.tokens[i]!.push(forced ? forced[i]![s]! : argmax(out.logits, i * V, V));
    });
    if (s === o.steps - 1) break;
    between?.();
    out = seqs.forward({ chunks: o.prompts.map((p, i) => ({ seq: i, tokens: [run.tokens[i]![s]!], startPos: p.length + s })), count: true, recordRouting: true });
    run.routing.push(out.routing!);
  }
  seqs.closeAll();
  const after = be.readCounter();
  run.counts = Uint32Array.from(after, (x, i) => (x - before[i]!) >>> 0);
  return run;
}

function sameLogits(a: Run, b: Run): number {
  let diff = 0;
  a.logits.forEach((lg, s) => { for (let j = 0; j < lg.length; j++) if (lg[j] !== b.logits[s]![j]) diff++; });
  return diff;
}

export function runBackendConformance(name: string, make: BackendFactory, o: ConformanceOptions): void {
  test(`conformance, ${name}: the counter is the histogram of the counted steps' routed picks`, async () => {
    const be = await make();
    try {
      const r = decode(be, o);
      const { numExperts: E, topK: K } = be.spec;
      const L = be.banks.layers;
      const want = new Uint32Array(L * E);
      // Counted steps only (the prefill ran with count: false), every routed pick once.
      for (const routing of r.routing) for (let i = 0; i < routing.length; i++) want[(Math.floor(i / K) % L) * E + routing[i]!]!++;
      assert.deepEqual(r.counts, want);
    } finally {
      be.dispose();
    }
  });

  test(`conformance, ${name}: placement never changes a result (all hot, ${o.hot} hot, a shuffled map: same logits bit for bit)`, async () => {
    const all = await make();
    const ref = decode(all, o);
    const E = all.spec.numExperts;
    const L = all.banks.layers;
    all.dispose();
    const rand = mulberry32(11);
    const shuffled = Array.from({ length: L }, () => {
      const ids = Array.from({ length: E }, (_, e) => e);
      for (let i = E - 1; i > 0; i--) { const j = Math.floor(rand() * (i + 1)); [ids[i], ids[j]] = [ids[j]!, ids[i]!]; }
      return { hot: ids.slice(0, o.hot), cold: ids.slice(o.hot) };
    });
    const placements: BankPlacement[] = [
      { hotPerLayer: o.hot },
      { version: 1, model: all.spec.name, layers: L, experts: E, hot_per_layer: o.hot, layers_map: shuffled },
    ];
    for (const p of placements) {
      const be = await make(p);
      try {
        const r = decode(be, o, undefined, ref.tokens);
        assert.equal(sameLogits(r, ref), 0, `placement ${'layers_map' in p ? 'shuffled map' : `${o.hot} hot`}: logits differ from all hot`);
      } finally {
        be.dispose();
      }
    }
  });

  test(`conformance, ${name}: background moves land losslessly while steps run; moving back gives back the boot digest`, async () => {
    const all = await make();
    const ref = decode(all, o);
    all.dispose();
    const be = await make({ hotPerLayer: o.hot });
    try {
      const banks = be.banks;
      const E = banks.experts;
      const boot = mapFromBanks(banks, be.spec.name);
      const bootDigest = banks.digest();
      const rand = mulberry32(5);
      const moves = new MovesInFlight(banks);
      let landed = 0;
      const churn = (): void => {
        landed += moves.settle().length;
        for (let l = 0; l < banks.layers; l++) {
          for (let k = 0; k < (o.movesPerLayer ?? 2); k++) {
            const hr = Math.floor(rand() * o.hot), cr = Math.floor(rand() * (E - o.hot));
            if (moves.busy(l, hr, cr)) continue;
            moves.request({ layer: l, hotRow: hr, coldRow: cr });
            // A request naming a row in flight is refused, whatever the backend.
            if (k === 0) assert.throws(() => banks.requestSwap(l, hr, cr), (e: Error & { code?: string }) => e.code === 'BAD_ARGUMENT');
          }
        }
      };
      const r = decode(be, o, churn, ref.tokens);
      landed += moves.drain().length;
      assert.equal(sameLogits(r, ref), 0, 'logits while moves land == all hot');
      assert.ok(landed >= (o.minLanded ?? 50), `only ${landed} moves landed`);
      for (const s of planRestore(mapFromBanks(banks, be.spec.name), boot, 0)) moves.requestWhenFree(s);
      moves.drain();
      assert.deepEqual(mapFromBanks(banks, be.spec.name), boot, 'the boot map is back');
      assert.equal(banks.digest(), bootDigest, 'and so is the digest');
    } finally {
      be.dispose();
    }
  });

  test(`conformance, ${name}: a bad step is refused before anything changes; logits go into a caller's buffer`, async () => {
    const be = await make({ hotPerLayer: o.hot });
    try {
      const V = be.spec.vocabSize;
      const p = [...o.prompts[0]!];
      const seqs = new DirectSequences(be);
      seqs.open(0, p.length + 4);
      const first = seqs.forward({ chunks: [{ seq: 0, tokens: p, startPos: 0 }], count: true });
      const counter = be.readCounter();
      const one = seqs.chunk({ seq: 0, tokens: [1], startPos: p.length });
      const pool = be.kvCache;
      const bad = [
        { chunks: [seqs.chunk({ seq: 0, tokens: [V], startPos: p.length })] }, // token out of range
        { chunks: [one, { seq: 9, tokens: [1], startPos: 0 }] }, // a sequence not open (paged: no block table)
        ...(pool
          ? [
              { chunks: [{ ...one, blockTable: [] }] }, // a table short of the chunk's positions
              { chunks: [{ ...one, blockTable: [pool.numBlocks] }] }, // a block outside the pool
              { chunks: [one, { seq: 1, tokens: [1], startPos: 0, blockTable: one.blockTable! }] }, // two chunks writing one block
            ]
          : [{ chunks: [{ seq: 0, tokens: [1, 2, 3, 4, 5], startPos: p.length }] }]), // past the sequence's capacity
        { chunks: [] },
        { chunks: [one], logitsInto: new Float32Array(V - 1) }, // a logits buffer too small
      ];
      for (const b of bad) assert.throws(() => be.forward({ ...b, count: true }), (e: Error & { code?: string }) => e.code === 'BAD_ARGUMENT');
      assert.deepEqual(be.readCounter(), counter, 'the counter is unchanged');
      // The KV cache too: the next good step equals a fresh backend's.
      const next = be.forward({ chunks: [one], count: false }).logits;
      seqs.close(0);
      const fresh = await make({ hotPerLayer: o.hot });
      const fs = new DirectSequences(fresh);
      try {
        fs.open(0, p.length + 4);
        // Into a caller's buffer (what a serving loop passes every step): the same logits, a view of its start.
        const into = new Float32Array(V + 3).fill(Number.NaN);
        const f0 = fs.forward({ chunks: [{ seq: 0, tokens: p, startPos: 0 }], count: true, logitsInto: into });
        assert.deepEqual(f0.logits, first.logits);
        assert.ok(f0.logits.buffer === into.buffer && f0.logits.byteOffset === into.byteOffset && f0.logits.length === V, 'logits are a view of logitsInto');
        assert.ok(into.subarray(V).every(Number.isNaN), 'nothing past the step\'s logits is written');
        assert.deepEqual(fs.forward({ chunks: [{ seq: 0, tokens: [1], startPos: p.length }], count: false }).logits, next);
        // argmaxOnly (on the device for CUDA): each chunk's argmax as the host's argmax of its logits picks it: a
        // prompt chunk, a decode step of two rows out of sequence order, a prompt of 20 tokens beside a decode
        // row (a prefill piece); each step run again at the same positions for its logits.
        fs.open(1, p.length + 4);
        fs.open(2, 24);
        const a = fs.forward({ chunks: [{ seq: 1, tokens: p, startPos: 0 }], count: false, argmaxOnly: true });
        assert.deepEqual(Array.from(a.argmax!), [argmax(first.logits, 0, V)]);
        const long = Array.from({ length: 20 }, (_, i) => p[i % p.length]!);
        for (const chunks of [
          [{ seq: 1, tokens: [1], startPos: p.length }, { seq: 0, tokens: [2], startPos: p.length + 1 }],
          [{ seq: 0, tokens: [3], startPos: p.length + 2 }, { seq: 2, tokens: long, startPos: 0 }],
        ]) {
          const picked = fs.forward({ chunks, count: false, argmaxOnly: true }).argmax!;
          const logits = fs.forward({ chunks, count: false }).logits;
          assert.deepEqual(Array.from(picked), chunks.map((_, i) => argmax(logits, i * V, V)), `argmaxOnly of ${chunks.map((c) => c.tokens.length).join(' + ')} tokens`);
        }
        assert.equal(argmax(fs.forward({ chunks: [{ seq: 1, tokens: [1], startPos: p.length }], count: false }).logits, 0, V), argmax(next, 0, V));
        if (fresh.submit) {
          // Run ahead (submit): two rows out of sequence order, then the next step submitted before the first is
          // waited for, each row's token fed from that step's argmax: the argmax of the same step given the tokens.
          const s0 = fs.submit({ chunks: [{ seq: 1, tokens: [4], startPos: p.length }, { seq: 0, tokens: [5], startPos: p.length + 1 }], count: false, argmaxOnly: true });
          const s1 = fs.submit({ chunks: [0, 1].map((seq) => ({ seq, tokens: [FED_TOKEN], startPos: p.length + 2 - seq })), count: false, argmaxOnly: true });
          const [t1, t0] = Array.from(s0.wait().argmax!);
          const fed = Array.from(s1.wait().argmax!);
          const given = fs.forward({ chunks: [{ seq: 0, tokens: [t0!], startPos: p.length + 2 }, { seq: 1, tokens: [t1!], startPos: p.length + 1 }], count: false, argmaxOnly: true });
          assert.deepEqual(fed, Array.from(given.argmax!), 'fed tokens: the argmax of the step given them');
        }
      } finally {
        fresh.dispose();
      }
    } finally {
      be.dispose();
    }
  });
}
