// Parity of the CPU backend with the transformers float32 reference on the tiny-moe fixture: greedy
// tokens, top-5 logits, and prefill/decode routing per layer, with near-ties reported by their margin.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { loadModel } from '../src/model/load.ts';
import { createCpuBackend, type CpuBackend } from '../src/backend/cpu/cpu-backend.ts';
import { argmax } from '../src/backend/argmax.ts';
import { TINY_MOE_MODEL as MODEL, tinyMoeFile } from '../fixtures/fixture-paths.ts';
import { DirectSequences } from '../src/backend/sequences.ts';

/** Largest router-probability gap a routing mismatch may have and still count as a near-tie. */
const ROUTING_TIE = 1e-5;
/** Largest top-two logit gap a greedy-token mismatch may have and still count as a near-tie. */
const LOGIT_TIE = 1e-4;
const LOGIT_TOL = 1e-3;
/** Loaded once for both tests. */
let model: ReturnType<typeof loadModel> | null = null;
const load = (): ReturnType<typeof loadModel> => (model ??= loadModel(MODEL));

interface Step {
  token: number;
  top5_ids: number[];
  top5_logits: number[];
  routing: number[][];
}
interface Case {
  domain: string;
  prompt_ids: number[];
  prefill_routing: number[][][];
  steps: Step[];
}

/** A routing mismatch: where, and the router-probability gap between the experts that traded places. */
interface NearTie {
  where: string;
  margin: number;
}

/** The closest calls seen, matched or not: how near the data came to a tie. */
const closest = {
  /** Smallest gap between the k-th pick and the best expert left out. */
  boundary: Infinity,
  /** Smallest gap between consecutive picks (the order within the top-k). */
  order: Infinity,
  observe(ids: number[], p: Float32Array): void {
    let out = 0;
    for (let e = 0; e < p.length; e++) if (!ids.includes(e)) out = Math.max(out, p[e]!);
    this.boundary = Math.min(this.boundary, p[ids[ids.length - 1]!]! - out);
    for (let k = 1; k < ids.length; k++) this.order = Math.min(this.order, p[ids[k - 1]!]! - p[ids[k]!]!);
  },
};

/**
 * Compares one token's routing (all layers) with the reference; returns the mismatched layers' margins.
 * `row` is the token's index in the step's recorded routing.
 */
function compareRouting(b: CpuBackend, routing: Int32Array, row: number, ref: number[][], where: string): NearTie[] {
  const { numLayers: L, topK: K, numExperts: E } = b.spec;
  const probs = b.lastRouterProbs!;
  const ties: NearTie[] = [];
  for (let l = 0; l < L; l++) {
    const ours = Array.from(routing.subarray((row * L + l) * K, (row * L + l) * K + K));
    closest.observe(ours, probs.subarray((row * L + l) * E, (row * L + l) * E + E));
    const want = ref[l]!;
    if (ours.every((e, k) => e === want[k])) continue;
    // The margin: the largest probability gap between the expert we put at a rank and the reference's.
    let margin = 0;
    for (let k = 0; k < K; k++) {
      const p = (e: number): number => probs[(row * L + l) * E + e]!;
      margin = Math.max(margin, Math.abs(p(ours[k]!) - p(want[k]!)));
    }
    ties.push({ where: `${where} layer ${l}: ours [${ours}] ref [${want}]`, margin });
  }
  return ties;
}

test('CPU backend matches the transformers float32 reference on all parity cases', async (t) => {
  const fixture = JSON.parse(readFileSync(tinyMoeFile('parity.json'), 'utf8')) as { cases: Case[] };
  const { spec, weights } = await load();
  const b = createCpuBackend(spec, weights, { keepRouterProbs: true, placement: { hotPerLayer: 49 } });
  const cases = fixture.cases;
  assert.equal(cases.length, 21);
  const V = spec.vocabSize;
  const routingTies: NearTie[] = [];
  const tokenTies: NearTie[] = [];
  let maxLogitErr = 0;
  let routingChecks = 0;
  let minTop2 = Infinity;

  // Prefill all cases in one step, one chunk each.
  const seqs = new DirectSequences(b);
  cases.forEach((c, i) => seqs.open(i, c.prompt_ids.length + c.steps.length + 1));
  let out = seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: false, recordRouting: true });
  let row = 0;
  cases.forEach((c, i) => {
    c.prompt_ids.forEach((_, p) => {
      routingTies.push(...compareRouting(b, out.routing!, row++, c.prefill_routing[p]!, `case ${i} prefill token ${p}`));
      routingChecks += spec.numLayers;
    });
  });

  // 40 greedy steps for all cases together: check the logits that choose steps[s].token, then feed it
  // (the reference token, so one near-tie cannot derail the rest of a case) and check its routing.
  const steps = cases[0]!.steps.length;
  for (let s = 0; s < steps; s++) {
    cases.forEach((c, i) => {
      const ref = c.steps[s]!;
      const logits = out.logits.subarray(i * V, i * V + V);
      ref.top5_ids.forEach((id, k) => {
        const err = Math.abs(logits[id]! - ref.top5_logits[k]!);
        maxLogitErr = Math.max(maxLogitErr, err);
        assert.ok(err < LOGIT_TOL, `case ${i} step ${s}: logit of ${id} is ${logits[id]}, reference ${ref.top5_logits[k]}`);
      });
      const best = argmax(logits, 0, V);
      minTop2 = Math.min(minTop2, ref.top5_logits[0]! - ref.top5_logits[1]!);
      if (best !== ref.token) tokenTies.push({ where: `case ${i} step ${s}: ours ${best} ref ${ref.token}`, margin: Math.abs(logits[best]! - logits[ref.token]!) });
    });
    out = seqs.forward({
      chunks: cases.map((c, i) => ({ seq: i, tokens: [c.steps[s]!.token], startPos: c.prompt_ids.length + s })),
      count: false,
      recordRouting: true,
    });
    cases.forEach((c, i) => {
      routingTies.push(...compareRouting(b, out.routing!, i, c.steps[s]!.routing, `case ${i} step ${s}`));
      routingChecks += spec.numLayers;
    });
  }

  const smallest = (xs: NearTie[]): string => xs.map((x) => x.margin.toExponential(2)).sort().slice(0, 5).join(', ') || '-';
  t.diagnostic(`greedy tokens: ${cases.length * steps} checked, ${tokenTies.length} near-tie mismatches (margins ${smallest(tokenTies)})`);
  t.diagnostic(`routing: ${routingChecks} token-layers checked, ${routingTies.length} near-tie mismatches (margins ${smallest(routingTies)})`);
  t.diagnostic(`largest top-5 logit error ${maxLogitErr.toExponential(2)}; smallest reference top-2 logit gap ${minTop2.toExponential(2)}`);
  t.diagnostic(`closest router calls: k-th vs (k+1)-th ${closest.boundary.toExponential(2)}, within the top-k order ${closest.order.toExponential(2)}`);
  for (const x of [...tokenTies, ...routingTies]) t.diagnostic(`near-tie ${x.where} margin ${x.margin.toExponential(3)}`);
  for (const x of tokenTies) assert.ok(x.margin < LOGIT_TIE, `greedy token mismatch beyond a near-tie: ${x.where} (margin ${x.margin})`);
  for (const x of routingTies) assert.ok(x.margin < ROUTING_TIE, `routing mismatch beyond a near-tie: ${x.where} (margin ${x.margin})`);
});

test('the real model gives bit-identical logits with all experts hot, 49 of 64 hot, and after random swaps', async () => {
  const { spec, weights } = await load();
  const prompts = [[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12]];
  const run = (b: CpuBackend): Float32Array => {
    const seqs = new DirectSequences(b);
    prompts.forEach((p, i) => seqs.open(i, 16));
    const logits = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 })), count: false }).logits;
    seqs.closeAll();
    return logits;
  };
  const allHot = run(createCpuBackend(spec, weights));
  const b = createCpuBackend(spec, weights, { placement: { hotPerLayer: 49 } });
  assert.deepEqual(run(b), allHot);
  const before = b.banks.digest();
  let x = 12345;
  const next = (n: number): number => ((x = (x * 1103515245 + 12345) >>> 0) % n);
  for (let i = 0; i < 200; i++) b.banks.swapRows(next(6), next(49), next(15));
  assert.notEqual(b.banks.digest(), before);
  assert.deepEqual(run(b), allHot);
});
