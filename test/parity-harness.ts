// Parity of the CPU backend with a fixture's transformers float32 reference (the format of
// fixtures/README.md): greedy tokens, top-5 logits and prefill/decode routing of every MoE layer,
// with each mismatch reported by its margin, then a residency round trip (swaps, restore, same digest and
// logits). Shared by the family parity tests.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { TestContext } from 'node:test';
import { loadModel } from '../src/model/load.ts';
import { moeLayerCount, moeLayerIds } from '../src/model/spec.ts';
import { createCpuBackend, type CpuBackend, type CpuBackendOptions } from '../src/backend/cpu/cpu-backend.ts';
import { mapFromBanks, placeMap } from '../src/backend/bank-map.ts';
import { ResidencyDriver } from '../src/engine/residency-driver.ts';
import { mulberry32 } from '../src/util/rng.ts';
import { recordRun } from '../src/backend/cpu/test-helpers.ts';
import { argmax } from '../src/backend/argmax.ts';
import { DirectSequences } from '../src/backend/sequences.ts';

interface Step {
  token: number;
  top5_ids: number[];
  top5_logits: number[];
  routing: number[][];
  routing_weights: number[][];
}
interface Case {
  prompt_ids: number[];
  prefill_routing: number[][][];
  steps: Step[];
}
export interface Fixture {
  cases: Case[];
  /** Model layers with routed experts, in the order of the routing lists. */
  moe_layers: number[];
  top_k: number;
  num_experts: number;
}

/** What a parity run found; the test asserts on it and prints it. */
export interface ParityReport {
  cases: number;
  tokens: number;
  tokenMismatches: { where: string; margin: number }[];
  routingChecks: number;
  routingMismatches: { where: string; margin: number }[];
  maxLogitErr: number;
  maxWeightErr: number;
  /** Smallest gap between the k-th choice score and the best one left out, over every check. */
  closestBoundary: number;
}

/** Largest top-5 logit error accepted. */
export const LOGIT_TOL = 1e-4;
/** Largest choice-score gap a routing mismatch may have and still count as a near-tie. */
export const ROUTING_TIE = 1e-5;
/** Largest logit gap a greedy-token mismatch may have and still count as a near-tie. */
export const TOKEN_TIE = 1e-4;

/** The checkpoint in `dir` against the references in `parityFile` (a parity.json). */
export async function runParity(dir: string, parityFile: string, opts: CpuBackendOptions & { hot: number }): Promise<ParityReport> {
  const fixture = JSON.parse(readFileSync(parityFile, 'utf8')) as Fixture;
  const { spec, weights } = await loadModel(dir);
  const Lm = moeLayerCount(spec);
  assert.deepEqual([...moeLayerIds(spec)], fixture.moe_layers);
  assert.equal(spec.topK, fixture.top_k);
  assert.equal(spec.numExperts, fixture.num_experts);
  const b = createCpuBackend(spec, weights, { ...opts, keepRouterProbs: true, placement: { hotPerLayer: opts.hot } });
  try {
    return decodeAll(b, fixture.cases, Lm);
  } finally {
    b.dispose();
  }
}

function decodeAll(b: CpuBackend, cases: Case[], Lm: number): ParityReport {
  const { topK: K, numExperts: E, vocabSize: V } = b.spec;
  const r: ParityReport = { cases: cases.length, tokens: 0, tokenMismatches: [], routingChecks: 0, routingMismatches: [], maxLogitErr: 0, maxWeightErr: 0, closestBoundary: Infinity };
  const compare = (routing: Int32Array, weights: Float32Array, row: number, ref: number[][], refW: number[][] | undefined, where: string): void => {
    const probs = b.lastRouterProbs!;
    for (let m = 0; m < Lm; m++) {
      r.routingChecks++;
      const at = (row * Lm + m) * K;
      const ours = Array.from(routing.subarray(at, at + K));
      const p = (e: number): number => probs[(row * Lm + m) * E + e]!;
      let out = -Infinity;
      for (let e = 0; e < E; e++) if (!ours.includes(e)) out = Math.max(out, p(e));
      r.closestBoundary = Math.min(r.closestBoundary, Math.min(...ours.map(p)) - out);
      const want = ref[m]!;
      if (ours.some((e, k) => e !== want[k])) {
        let margin = 0;
        for (let k = 0; k < K; k++) margin = Math.max(margin, Math.abs(p(ours[k]!) - p(want[k]!)));
        r.routingMismatches.push({ where: `${where} moe layer ${m}: ours [${ours}] ref [${want}]`, margin });
        continue;
      }
      if (refW) for (let k = 0; k < K; k++) r.maxWeightErr = Math.max(r.maxWeightErr, Math.abs(weights[at + k]! - refW[m]![k]!));
    }
  };

  const seqs = new DirectSequences(b);
  cases.forEach((c, i) => seqs.open(i, c.prompt_ids.length + c.steps.length + 1));
  let out = seqs.forward({ chunks: cases.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: true, recordRouting: true });
  let row = 0;
  cases.forEach((c, i) => c.prompt_ids.forEach((_, p) => compare(out.routing!, out.routingWeights!, row++, c.prefill_routing[p]!, undefined, `case ${i} prefill token ${p}`)));
  const steps = cases[0]!.steps.length;
  for (let s = 0; s < steps; s++) {
    cases.forEach((c, i) => {
      const ref = c.steps[s]!;
      const logits = out.logits.subarray(i * V, i * V + V);
      ref.top5_ids.forEach((id, k) => (r.maxLogitErr = Math.max(r.maxLogitErr, Math.abs(logits[id]! - ref.top5_logits[k]!))));
      const best = argmax(logits, 0, V);
      r.tokens++;
      if (best !== ref.token) r.tokenMismatches.push({ where: `case ${i} step ${s}: ours ${best} ref ${ref.token}`, margin: Math.abs(logits[best]! - logits[ref.token]!) });
    });
    // Feed the reference token, so that one near-tie cannot derail the rest of a case.
    out = seqs.forward({
      chunks: cases.map((c, i) => ({ seq: i, tokens: [c.steps[s]!.token], startPos: c.prompt_ids.length + s })),
      count: true,
      recordRouting: true,
    });
    cases.forEach((c, i) => compare(out.routing!, out.routingWeights!, i, c.steps[s]!.routing, c.steps[s]!.routing_weights, `case ${i} step ${s}`));
  }
  // The counter saw every routed pick of every MoE layer (and nothing of a dense layer).
  const counted = b.readCounter().reduce((a, x) => a + x, 0);
  const tokens = cases.reduce((a, c) => a + c.prompt_ids.length + steps, 0);
  assert.equal(b.readCounter().length, Lm * E);
  assert.equal(counted, tokens * Lm * K);
  seqs.closeAll();
  return r;
}

/** Prints the report as diagnostics and asserts it: tokens, logits and routing within the bars. */
export function checkReport(t: TestContext, r: ParityReport): void {
  const margins = (xs: { margin: number }[]): string => xs.map((x) => x.margin.toExponential(2)).join(', ') || '-';
  t.diagnostic(`greedy tokens: ${r.tokens} over ${r.cases} cases, ${r.tokenMismatches.length} mismatches (margins ${margins(r.tokenMismatches)})`);
  t.diagnostic(`routing: ${r.routingChecks} token-layers, ${r.routingMismatches.length} mismatches (margins ${margins(r.routingMismatches)})`);
  t.diagnostic(`largest top-5 logit error ${r.maxLogitErr.toExponential(2)}; largest routing weight error ${r.maxWeightErr.toExponential(2)}; closest router call ${r.closestBoundary.toExponential(2)}`);
  for (const x of [...r.tokenMismatches, ...r.routingMismatches]) t.diagnostic(`near-tie ${x.where} margin ${x.margin.toExponential(3)}`);
  assert.ok(r.maxLogitErr < LOGIT_TOL, `top-5 logit error ${r.maxLogitErr} over ${LOGIT_TOL}`);
  assert.ok(r.maxWeightErr < LOGIT_TOL, `routing weight error ${r.maxWeightErr} over ${LOGIT_TOL}`);
  for (const x of r.tokenMismatches) assert.ok(x.margin < TOKEN_TIE, `greedy token mismatch beyond a near-tie: ${x.where} (margin ${x.margin})`);
  for (const x of r.routingMismatches) assert.ok(x.margin < ROUTING_TIE, `routing mismatch beyond a near-tie: ${x.where} (margin ${x.margin})`);
}

/**
 * Residency round trip: logits of a short batch, then random hot/cold swaps (different bank bytes, same
 * logits), then the boot map restored (the boot digest again, same logits).
 */
export async function roundTrip(dir: string, hot: number, opts: CpuBackendOptions = {}): Promise<{ swaps: number; restoreSwaps: number }> {
  const { spec, weights } = await loadModel(dir);
  const b = createCpuBackend(spec, weights, { ...opts, placement: { hotPerLayer: hot } });
  try {
    const prompts = [[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12]];
    const seqs = new DirectSequences(b);
    const run = (): Float32Array => {
      prompts.forEach((_, i) => seqs.open(i, 16));
      const logits = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 })), count: false }).logits;
      seqs.closeAll();
      return logits;
    };
    const boot = mapFromBanks(b.banks, spec.name);
    assert.equal(boot.layers, moeLayerCount(spec));
    const digest = b.banks.digest();
    const before = run();
    const rand = mulberry32(7);
    const swaps = 50 * b.banks.layers;
    for (let i = 0; i < swaps; i++) {
      b.banks.swapRows(Math.floor(rand() * b.banks.layers), Math.floor(rand() * hot), Math.floor(rand() * (spec.numExperts - hot)));
    }
    assert.notEqual(b.banks.digest(), digest);
    assert.deepEqual(run(), before);
    const restoreSwaps = placeMap(b.banks, spec.name, boot);
    assert.equal(b.banks.digest(), digest);
    assert.deepEqual(run(), before);
    return { swaps, restoreSwaps };
  } finally {
    b.dispose();
  }
}

/**
 * The same outputs byte for byte (logits, routing, weights, counter, digest) with one thread and SIMD (the
 * default where it runs), two threads, and the plain JS loops, over a prefill and swapping decode steps.
 */
export async function configsAgree(dir: string, hot: number): Promise<void> {
  const { spec, weights } = await loadModel(dir);
  const batches = [[[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12]]];
  const sched = { swapsPerStep: 2, seed: 3, token: (f: number, i: number, s: number) => f * 31 + i * 7 + s, counted: () => true };
  const record = async (opts: CpuBackendOptions) => {
    const b = createCpuBackend(spec, weights, { ...opts, placement: { hotPerLayer: hot } });
    try {
      await b.ready();
      return recordRun(b, batches, 6, sched);
    } finally {
      b.dispose();
    }
  };
  const base = await record({ threads: 1 });
  assert.deepEqual(await record({ threads: 2 }), base);
  assert.deepEqual(await record({ threads: 1, simd: false }), base);
}

/**
 * The live residency loop on a family: the same driver and controller as serving (count, drain, decide,
 * swap between steps), over greedy decode of four sequences. Checks the counts' geometry (MoE layers x
 * routed experts), that swaps were applied without changing a token or a logit (against an all-hot run),
 * and that restore_map brings the banks back to the boot digest.
 */
export async function liveResidency(dir: string, hot: number): Promise<{ applied: number; restored: number }> {
  const { spec, weights } = await loadModel(dir);
  const prompts = [[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12], [42, 4242, 8000, 5], [100, 200, 300]];
  const STEPS = 48;
  const decode = (b: CpuBackend, hook?: ResidencyDriver): Buffer[] => {
    const out: Buffer[] = [];
    const seqs = new DirectSequences(b);
    prompts.forEach((p, i) => seqs.open(i, p.length + STEPS + 1));
    let logits = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 })), count: false }).logits;
    for (let s = 0; s < STEPS; s++) {
      out.push(Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength));
      const next = prompts.map((_, i) => argmax(logits, i * spec.vocabSize, spec.vocabSize));
      const count = hook?.countStep(prompts.length) ?? false;
      logits = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: [next[i]!], startPos: p.length + s })), count }).logits;
      hook?.afterStep({ step: s, tokens: prompts.length, counted: count, durationNs: 1000 });
    }
    seqs.closeAll();
    return out;
  };
  const reference = decode(createCpuBackend(spec, weights));
  const b = createCpuBackend(spec, weights, { placement: { hotPerLayer: hot } });
  const digest = b.banks.digest();
  const driver = new ResidencyDriver({
    backend: b, frozen: false, log: () => {},
    budgets: { drain_every: 4, half_life_tokens: 32, hysteresis: 1, min_average: 0.01, move_cost_picks: 0, swaps_per_layer_per_drain: 4, swaps_per_step: 16 },
  });
  assert.deepEqual(decode(b, driver), reference);
  const dump = driver.controller.dumpCounts();
  assert.equal(dump.cumulative.length, moeLayerCount(spec));
  assert.ok(dump.cumulative.every((row) => row.length === spec.numExperts));
  const applied = driver.controller.stats.applied;
  assert.ok(applied > 0, 'the controller applied no swap');
  assert.equal(driver.controller.stats.refused, 0);
  assert.notEqual(b.banks.digest(), digest, 'the controller swapped no rows');
  const res = driver.control({ restore_map: true });
  assert.ok(res.ok);
  const before = driver.controller.stats.applied;
  for (let s = STEPS; driver.controller.queueDepth > 0 && s < STEPS + 64; s++) {
    driver.afterStep({ step: s, tokens: 1, counted: false, durationNs: 1000 });
  }
  assert.equal(driver.controller.queueDepth, 0);
  assert.equal(b.banks.digest(), digest);
  assert.deepEqual(decode(b), reference);
  return { applied, restored: driver.controller.stats.applied - before };
}
