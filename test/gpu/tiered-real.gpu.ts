// Tiered experts at real shapes: 64 of 128 experts hot, the cold bank read in place from mapped
// host memory, thousands of background moves landing while greedy decode runs. Every token and logit must
// equal the all-hot run, and moving the boot map back must give back its digest. The host expert lane's case runs on
// a bf16 checkpoint (REAL_CKPT), on a block-FP8 one (REAL_CKPT_FP8: make-checkpoint.py --format fp8) and on a gpt-oss
// MXFP4 one (REAL_CKPT_MXFP4: make-checkpoint.py --preset gpt-oss-20b --layers 2 --format mxfp4).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import { SPLIT_UPDATE_STEPS } from '../../src/backend/cuda/host-lane/lane.ts';
import { splitText } from '../../src/backend/cuda/host-lane/split.ts';
import type { Backend, ExpertBanks } from '../../src/backend/backend.ts';
import { mapFromBanks } from '../../src/backend/bank-map.ts';
import { MovesInFlight } from '../../src/backend/moves-in-flight.ts';
import { identityRowMap } from '../../src/residency/rowmap.ts';
import { planRestore } from '../../src/residency/restore.ts';
import { mulberry32 } from '../../src/util/rng.ts';
import { report } from './model.gpu.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

/** A make-checkpoint folder from env `name` (with refs.json), or why the tests on it are skipped. */
function checkpoint(name: string): { dir?: string; skip: string | false } {
  const dir = process.env[name];
  return dir && existsSync(join(dir, 'refs.json')) ? { dir, skip: false } : { skip: `${name} (a make-checkpoint folder with refs.json) not set` };
}
const { dir, skip } = checkpoint('REAL_CKPT');
const fp8 = checkpoint('REAL_CKPT_FP8');
const mxfp4 = checkpoint('REAL_CKPT_MXFP4');
const STEPS = Number(process.env['TIERED_STEPS'] ?? 800);

/**
 * Background moves between steps: `step()` lands what finished, then asks for up to `perLayer` random exchanges per
 * layer of rows not moving (`hot` of the bank's experts hot); the counts say what happened.
 */
function randomMoves(banks: ExpertBanks, hot: number, seed: number, perLayer: number) {
  const rand = mulberry32(seed);
  const moves = new MovesInFlight(banks);
  const E = banks.experts;
  const c = { moves, requested: 0, landed: 0, maxMoving: 0, step: (): void => {} };
  c.step = () => {
    c.landed += moves.settle().length;
    for (let l = 0; l < banks.layers; l++) {
      for (let k = 0; k < perLayer; k++) {
        const hr = Math.floor(rand() * hot), cr = Math.floor(rand() * (E - hot));
        if (moves.busy(l, hr, cr)) continue;
        moves.request({ layer: l, hotRow: hr, coldRow: cr });
        c.requested++;
      }
    }
    c.maxMoving = Math.max(c.maxMoving, banks.moving);
  };
  return c;
}

/** Greedy decode of every case batched; `between` runs between steps. Returns tokens and the logits' bytes per step. */
function greedy(be: Backend, prompts: number[][], steps: number, between?: (step: number) => void): { tokens: number[][]; logits: Float32Array[] } {
  const V = be.spec.vocabSize;
  const seqs = new DirectSequences(be);
  prompts.forEach((p, i) => seqs.open(i, p.length + steps + 1));
  let o = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: p, startPos: 0 })), count: false });
  const tokens: number[][] = prompts.map(() => []);
  const logits: Float32Array[] = [];
  for (let s = 0; s < steps; s++) {
    logits.push(o.logits);
    prompts.forEach((_, i) => tokens[i]!.push(argmax(o.logits, i * V, V)));
    if (s === steps - 1) break;
    between?.(s);
    o = seqs.forward({ chunks: prompts.map((p, i) => ({ seq: i, tokens: [tokens[i]![s]!], startPos: p.length + s })), count: true });
  }
  seqs.closeAll();
  return { tokens, logits };
}

test('real shapes, 64/128 hot: thousands of background moves land while greedy decode runs; tokens and logits == all-hot; restore gives back the digest', { skip }, async () => {
  const refs = (JSON.parse(readFileSync(join(dir!, 'refs.json'), 'utf8')) as { cases: { prompt_ids: number[] }[] }).cases;
  const prompts = refs.map((c) => c.prompt_ids);
  const m = await loadModelFor(dir!, 'cuda');
  const maxLen = Math.max(...prompts.map((p) => p.length)) + STEPS + 2;
  const allHot = await createCuda(m, { maxModelLen: maxLen, maxNumSeqs: prompts.length, kvCache: { tokens: maxLen * (prompts.length + 2) } });
  const want = greedy(allHot, prompts, STEPS);
  allHot.dispose();

  const H = 64;
  const be = await createCuda(m, { placement: { hotPerLayer: H }, maxModelLen: maxLen, maxNumSeqs: prompts.length, kvCache: { tokens: maxLen * (prompts.length + 2) }, spareRows: 4, copiesInFlight: 8 });
  const banks = be.banks;
  const E = banks.experts;
  const boot = identityRowMap(m.spec.name, banks.layers, E, H);
  const bootDigest = banks.digest();
  const churn = randomMoves(banks, H, 7, 4);
  const { moves } = churn;
  const got = greedy(be, prompts, STEPS, churn.step);
  churn.landed += moves.drain().length;
  const { requested, landed, maxMoving } = churn;
  const midDigest = banks.digest();

  let tokenDiffs = 0, logitDiffs = 0;
  got.tokens.forEach((t, i) => t.forEach((x, s) => { if (x !== want.tokens[i]![s]) tokenDiffs++; }));
  got.logits.forEach((lg, s) => { for (let j = 0; j < lg.length; j++) if (lg[j] !== want.logits[s]![j]) logitDiffs++; });

  // Back to the boot map with background moves (the restore plan, each swap once its rows are free).
  const plan = planRestore(mapFromBanks(banks, m.spec.name), boot, 0);
  for (const s of plan) moves.requestWhenFree(s);
  moves.drain();
  const afterDigest = banks.digest();
  be.dispose();
  report['tieredReal'] = { steps: STEPS, cases: prompts.length, requested, landed, maxMoving, tokenDiffs, logitDiffs, restoreSwaps: plan.length, bootDigest, midDigest, afterDigest };
  console.log(`# tiered real: ${STEPS} greedy steps x ${prompts.length} cases at ${H}/${E} hot; ${landed} background moves landed (${requested} requested, up to ${maxMoving} in flight); tokens differing from all-hot ${tokenDiffs}, logits differing ${logitDiffs}; restore ${plan.length} moves, digest ${afterDigest === bootDigest ? 'equal' : 'DIFFERENT'}`);
  assert.equal(tokenDiffs, 0, 'greedy tokens == all-hot');
  assert.equal(logitDiffs, 0, 'logits bit-identical to all-hot');
  assert.ok(landed >= 1000, `only ${landed} moves landed`);
  assert.notEqual(midDigest, bootDigest, 'the moves changed the placement');
  assert.equal(afterDigest, bootDigest, 'restore gives back the boot digest');
});

/**
 * The host expert lane on the checkpoint at `ckpt` (half its experts hot: 64 of 128, gpt-oss-20b's 16 of 32), at batch
 * 1 and 4, an expert a layer split with the GPU: every token and logit equal to all hot while moves land; the lane's
 * figures go to report[key].
 */
async function hostLaneCase(ckpt: string, key: string): Promise<void> {
  const refs = (JSON.parse(readFileSync(join(ckpt, 'refs.json'), 'utf8')) as { cases: { prompt_ids: number[] }[] }).cases;
  const prompts = refs.slice(0, 4).map((c) => c.prompt_ids);
  const steps = Math.max(16, Math.floor(STEPS / 4));
  const m = await loadModelFor(ckpt, 'cuda');
  const format = m.spec.quantization?.method ?? 'bf16';
  const maxLen = Math.max(...prompts.map((p) => p.length)) + steps + 2;
  const lanes: Record<string, unknown>[] = [];
  // Batch 1: each prompt alone; batch 4: the four together (each expert the host takes computed once for its rows).
  for (const B of [1, 4]) {
    const groups = B === 1 ? prompts.map((p) => [p]) : [prompts];
    const allHot = await createCuda(m, { maxModelLen: maxLen, maxNumSeqs: B, kvCache: { tokens: maxLen * (B + 2) } });
    const want = groups.map((g) => greedy(allHot, g, steps));
    allHot.dispose();
    // The lane's steps combine the picks in op_residual_norm, as fuseResidual: false does: the same bits either way.
    const unfusedHot = await createCuda(m, { maxModelLen: maxLen, maxNumSeqs: B, kvCache: { tokens: maxLen * (B + 2) }, tuning: { fuseResidual: false } });
    const wantUnfused = groups.map((g) => greedy(unfusedHot, g, steps));
    unfusedHot.dispose();

    const H = Math.floor(m.spec.numExperts / 2);
    const be = await createCuda(m, { placement: { hotPerLayer: H }, maxModelLen: maxLen, maxNumSeqs: B, kvCache: { tokens: maxLen * (B + 2) }, spareRows: 4, copiesInFlight: 8, hostExperts: {} });
    const lane = (be as CudaBackend).hostLane!;
    assert.ok(lane, `the lane started (${m.spec.numExperts - H} of ${m.spec.numExperts} experts are cold)`);
    const E = be.banks.experts;
    const churn = randomMoves(be.banks, H, 11, 1);
    const got = groups.map((g) => greedy(be, g, steps, churn.step));
    const landed = churn.landed + churn.moves.drain().length;
    const stats = lane.stats(), faults = lane.faults();
    be.dispose();
    let tokenDiffs = 0, logitDiffs = 0, unfusedDiffs = 0;
    got.forEach((g, c) => {
      g.tokens.forEach((row, i) => row.forEach((x, s) => { if (x !== want[c]!.tokens[i]![s]) tokenDiffs++; }));
      g.logits.forEach((lg, s) => {
        const w = want[c]!.logits[s]!, u = wantUnfused[c]!.logits[s]!;
        for (let j = 0; j < lg.length; j++) {
          if (!Object.is(lg[j], w[j])) logitDiffs++;
          if (!Object.is(lg[j], u[j])) unfusedDiffs++;
        }
      });
    });
    const usEach = (stats.busyMs * 1000) / Math.max(1, stats.requests);
    lanes.push({ format, batch: B, steps, cases: prompts.length, threads: lane.threads, simd: lane.simd, requests: stats.requests, usPerRequest: usEach, landed, tokenDiffs, logitDiffs, unfusedDiffs, faults, split: stats.split });
    console.log(`# host lane${format === 'bf16' ? '' : ` (${format})`}: ${prompts.length} x ${steps} greedy steps at batch ${B}, ${H}/${E} hot, ${lane.threads} threads (${lane.simd ? 'AVX-512' : 'reference'}); ${stats.requests} requests (${usEach.toFixed(0)} us each), ${landed} moves landed; tokens differing from all-hot ${tokenDiffs}, logits differing ${logitDiffs} (from all-hot unfused: ${unfusedDiffs}); ${splitText(stats.split)}`);
    assert.deepEqual(faults, { refused: 0, gpuTimeouts: 0 });
    assert.ok(stats.requests >= steps, `batch ${B}: the host computed picks (${stats.requests} requests)`);
    // Every 17th layer (HOST_EXPLORE) tried a neighbour of the split (the bits stayed all-hot's above); with two
    // updates or more the GPU's counts came back: the layers' cold phases measured where the split stands.
    assert.equal(stats.split.mode, 'measured');
    assert.equal(stats.split.parts, 4);
    if (groups.length * (steps + 1) >= 2 * SPLIT_UPDATE_STEPS) {
      assert.ok(stats.split.hostLayers > 0, `batch ${B}: the GPU's waits were counted`);
      // In quarters (the default) most layers split an expert with the GPU: those exchanged their units.
      assert.ok(stats.split.splitLayers > 0, `batch ${B}: layers split an expert (${stats.split.splitLayers})`);
      const measured = stats.split.layerUs.filter((u): u is number => u !== null);
      assert.ok(measured.length > 0 && measured.every((u) => u > 1 && u < 10_000), `batch ${B}: layers' cold phases measured at the split (${stats.split.layerUs.join(' ')} us)`);
    }
    assert.equal(tokenDiffs, 0, `batch ${B}: greedy tokens == all-hot`);
    assert.equal(logitDiffs, 0, `batch ${B}: logits bit-identical to all-hot`);
  }
  report[key] = lanes;
}

test('real shapes, 64/128 hot, the host expert lane at batch 1 and 4 (an expert a layer split with the GPU): tokens and logits == all-hot while moves land', { skip }, () => hostLaneCase(dir!, 'hostLane'));

test('real shapes, block FP8, 64/128 hot, the host expert lane at batch 1 and 4 (an expert a layer split with the GPU): tokens and logits == all-hot while moves land', { skip: fp8.skip }, () => hostLaneCase(fp8.dir!, 'hostLaneFp8'));

test('real shapes, gpt-oss MXFP4 (H = I = 2880: the lane\'s partial last round), half the experts hot, the host expert lane at batch 1 and 4 (an expert a layer split with the GPU): tokens and logits == all-hot while moves land', { skip: mxfp4.skip }, () => hostLaneCase(mxfp4.dir!, 'hostLaneMxfp4'));
