// The wasm SIMD linear kernel: bit-identical to the JS loops (linalg.ts) on random shapes with tails
// (inDim not a multiple of 4), offsets, row sub-ranges and batches; the whole backend with SIMD on is
// bit-identical to SIMD off (logits, routing, counter, banks) on the synthetic and the real model, with
// 1 and 2 threads, batch 1 and 4, hot/cold maps and swaps; the arena grows without moving old arrays;
// the option and RESIDENCY_CPU_SIMD are read as documented.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { WasmArena } from './arena.ts';
import { simdFma, simdKernel, simdKernelCalls, simdLinear } from './kernel.ts';
import { linear, linearRows } from '../linalg.ts';
import { MAX_GROUP, PICK, UNIT, computeExpertUnits, expertUnits } from '../expert-units.ts';
import { computeExpertUnitsSimd, expertScratch } from './experts.ts';
import { combinePicks, swigluExpert } from '../moe-ops.ts';
import { TabStage } from './stage.ts';
import { resolveSimd } from './simd-option.ts';
import { attentionHeadSimd } from './attention.ts';
import { attentionHead } from '../attention-ops.ts';
import { createCpuBackend, type CpuBackend } from '../cpu-backend.ts';
import { mulberry32, syntheticModel } from '../synthetic.ts';
import { bytesOf as bytes, recordRun } from '../test-helpers.ts';
import { loadModel } from '../../../model/load.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import type { ModelWeights } from '../../../model/weights.ts';
import type { BankPlacement } from '../../slot-tables.ts';
import { ResidencyError } from '../../../errors.ts';

const MODEL = resolve(process.cwd(), 'models/tiny-moe');

/** The kernel's variants this runtime runs: multiply and add, and relaxed_madd (the same sums) where it has relaxed SIMD. */
const VARIANTS = simdFma() ? [false, true] : [false];
const variant = (fma: boolean): string => (fma ? ' (fused multiply-add)' : ' (multiply, add)');

/** Values over many magnitudes, signs and some exact zeros (rounding differences would show). */
function fill(a: Float32Array, rand: () => number): void {
  for (let i = 0; i < a.length; i++) {
    const r = rand();
    a[i] = r < 0.05 ? 0 : (rand() * 2 - 1) * 10 ** Math.floor(rand() * 12 - 6);
  }
}

for (const fma of VARIANTS) test('kernel vs JS linear: bit-identical on random shapes, tails, offsets, row ranges and batches' + variant(fma), () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const stage = new TabStage(arena);
  const lin = simdLinear(arena, k, stage);
  const rand = mulberry32(7);
  const calls = simdKernelCalls();
  let compared = 0;
  for (let t = 0; t < 300; t++) {
    const rows = 1 + Math.floor(rand() * 11); // tiles of three input rows, then two or one left
    const outDim = 1 + Math.floor(rand() * 20);
    const inDim = 1 + Math.floor(rand() * 70); // every residue mod 4, tails of 0..3
    const wOff = Math.floor(rand() * 9);
    const w = arena.f32(wOff + outDim * inDim);
    const x = arena.f32(rows * inDim);
    const y = arena.f32(rows * outDim);
    fill(w, rand);
    fill(x, rand);
    const want = new Float32Array(rows * outDim);
    linear(want, w, wOff, x, rows, outDim, inDim);
    lin(y, w, wOff, x, rows, outDim, inDim);
    assert.ok(bytes(y).equals(bytes(want)), `rows ${rows} out ${outDim} in ${inDim} off ${wOff}`);
    // A row sub-range (what one thread's chunk computes) writes only its rows.
    const o0 = Math.floor(rand() * outDim);
    const o1 = o0 + Math.floor(rand() * (outDim - o0 + 1));
    y.fill(-1);
    want.fill(-1);
    linearRows(want, w, wOff, x, rows, outDim, inDim, o0, o1);
    const { yTab, xTab } = stage.linear(y, x, rows, outDim, inDim);
    k.linearAt(yTab, w.byteOffset + 4 * wOff, xTab, rows, inDim, o0, o1);
    assert.ok(bytes(y).equals(bytes(want)), `rows [${o0}, ${o1}) of out ${outDim} in ${inDim}`);
    compared += 2;
  }
  assert.equal(simdKernelCalls() - calls, compared);
  // Arrays outside the arena take the JS path, same result.
  const w = new Float32Array(12);
  const x = arena.f32(4);
  fill(w, rand);
  fill(x, rand);
  const y = arena.f32(3);
  const want = new Float32Array(3);
  const before = simdKernelCalls();
  lin(y, w, 0, x, 1, 3, 4);
  linear(want, w, 0, x, 1, 3, 4);
  assert.equal(simdKernelCalls(), before);
  assert.ok(bytes(y).equals(bytes(want)));
});

for (const fma of VARIANTS) test('kernel vs JS linear: extreme float32 values (largest, subnormal, -0, mixed signs) sum bit-identically' + variant(fma), () => {
  // The fused variant is exact only because a float32 product fits a float64: these are its edges.
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const lin = simdLinear(arena, k, new TabStage(arena));
  const rand = mulberry32(11);
  const edge = [3.4028234663852886e38, -3.4028234663852886e38, 1.401298464324817e-45, -1.1754942106924411e-38, 1.1754943508222875e-38, -0, 0, 1, -1, 16777215, 5.960464477539063e-8];
  for (let t = 0; t < 50; t++) {
    const [rows, outDim, inDim] = [1 + (t % 5), 1 + (t % 9), 1 + ((t * 7) % 23)];
    const w = arena.f32(outDim * inDim);
    const x = arena.f32(rows * inDim);
    for (const a of [w, x]) for (let i = 0; i < a.length; i++) a[i] = edge[Math.floor(rand() * edge.length)]! * (rand() < 0.5 ? 1 : 2 ** Math.floor(rand() * 40 - 20));
    const y = arena.f32(rows * outDim);
    const want = new Float32Array(rows * outDim);
    linear(want, w, 0, x, rows, outDim, inDim);
    lin(y, w, 0, x, rows, outDim, inDim);
    assert.ok(bytes(y).equals(bytes(want)), `rows ${rows} out ${outDim} in ${inDim}`);
  }
});

for (const fma of VARIANTS) test('kernel vs JS linear: wide rows go in several blocks of output rows (and a sub-range across them), bit-identical' + variant(fma), () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const stage = new TabStage(arena);
  const rand = mulberry32(8);
  // 128 KiB of weights a block: 6 rows of 5001 floats, so 17 rows make three blocks.
  for (const [rows, outDim, inDim, o0, o1] of [[5, 17, 5001, 0, 17], [4, 17, 5001, 5, 14], [1, 13, 8192, 0, 13]] as const) {
    const w = arena.f32(outDim * inDim);
    const x = arena.f32(rows * inDim);
    const y = arena.f32(rows * outDim).fill(-1);
    fill(w, rand);
    fill(x, rand);
    const want = new Float32Array(rows * outDim).fill(-1);
    linearRows(want, w, 0, x, rows, outDim, inDim, o0, o1);
    const { yTab, xTab } = stage.linear(y, x, rows, outDim, inDim);
    k.linearAt(yTab, w.byteOffset, xTab, rows, inDim, o0, o1);
    assert.ok(bytes(y).equals(bytes(want)), `rows ${rows} out [${o0}, ${o1}) of ${outDim} in ${inDim}`);
  }
});

for (const fma of VARIANTS) test('expert units through the kernel: each pick bit-identical to swigluExpert, grouped by row (up to MAX_GROUP picks a unit, odd sizes)' + variant(fma), () => {
  const rand = mulberry32(13);
  for (const [hidden, inter, tokens, topK, experts] of [[64, 24, 9, 3, 4], [66, 21, 40, 2, 3], [7, 5, 5, 2, 6], [13, 9, 80, 1, 2]] as const) {
    const arena = new WasmArena();
    const k = simdKernel(arena.memory, fma);
    const stage = new TabStage(arena);
    const rowSize = 3 * inter * hidden;
    // Hot rows in bank 0, cold rows in bank 1: experts [0, hot) hot.
    const hot = Math.ceil(experts / 2);
    const banks = [arena.f32(hot * rowSize), arena.f32((experts - hot) * rowSize)];
    for (const b of banks) fill(b, rand);
    const x = arena.f32(tokens * hidden);
    for (let i = 0; i < x.length; i++) x[i] = rand() * 2 - 1;
    // Each token's topK distinct experts; the picks ordered by slot as moe.ts splits them.
    const picks = tokens * topK;
    const ids = new Int32Array(picks);
    for (let t = 0; t < tokens; t++) {
      const perm = Array.from({ length: experts }, (_, e) => e).sort(() => rand() - 0.5);
      for (let j = 0; j < topK; j++) ids[t * topK + j] = perm[j]!;
    }
    const slots = Int32Array.from({ length: experts }, (_, e) => e);
    const order = Int32Array.from({ length: picks }, (_, p) => p).sort((a, b) => ids[a]! - ids[b]! || a - b);
    const units = new Int32Array(picks * UNIT);
    const unitPicks = new Int32Array(picks * PICK);
    const where = Int32Array.from({ length: 2 * experts }, (_, i) => (i % 2 === 0 ? (i / 2 < hot ? 0 : 1) : ((i - 1) / 2 < hot ? (i - 1) / 2 : (i - 1) / 2 - hot) * rowSize));
    const n = expertUnits(units, unitPicks, order, ids, slots, where, picks, topK, hidden);
    let most = 0;
    for (let u = 0; u < n; u++) most = Math.max(most, units[u * UNIT + 3]!);
    assert.ok(most <= MAX_GROUP);
    if (tokens * topK / experts > MAX_GROUP) assert.equal(most, MAX_GROUP, 'a row picked more than MAX_GROUP times makes several full units');
    // The spec: every pick alone.
    const spec = new Float32Array(picks * hidden);
    const act = new Float32Array(2 * inter);
    for (let p = 0; p < picks; p++) {
      const e = ids[p]!;
      const bank = e < hot ? banks[0]! : banks[1]!;
      swigluExpert(spec, p * hidden, bank, (e < hot ? e : e - hot) * rowSize, x, ((p / topK) | 0) * hidden, hidden, inter, act);
    }
    const js = new Float32Array(picks * hidden);
    computeExpertUnits(js, units, unitPicks, 0, n, banks, x, hidden, inter, act);
    assert.ok(bytes(js).equals(bytes(spec)), `JS units, hidden ${hidden} inter ${inter}`);
    const got = arena.f32(picks * hidden);
    computeExpertUnitsSimd(k, expertScratch(arena, inter), got, units, unitPicks, 0, n, banks, stage.promote(x, tokens * hidden), hidden, inter);
    assert.ok(bytes(got).equals(bytes(spec)), `SIMD units, hidden ${hidden} inter ${inter} (largest unit ${most} picks)`);
  }
});

test('combine through the kernel: bit-identical to combinePicks (odd hidden sizes, zero and negative weights)', () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory);
  const rand = mulberry32(17);
  for (const [tokens, topK, hidden] of [[1, 1, 1], [3, 6, 128], [5, 2, 7], [2, 8, 66], [7, 3, 13]] as const) {
    const w = arena.f32(tokens * topK);
    const pickOut = arena.f32(tokens * topK * hidden);
    fill(w, rand);
    fill(pickOut, rand);
    w[0] = -0;
    const want = new Float32Array(tokens * hidden);
    combinePicks(want, w, pickOut, tokens, topK, hidden);
    const got = arena.f32(tokens * hidden);
    k.combineAt(got.byteOffset, w.byteOffset, pickOut.byteOffset, tokens, topK, hidden);
    assert.ok(bytes(got).equals(bytes(want)), `tokens ${tokens} topK ${topK} hidden ${hidden}`);
  }
});

for (const fma of VARIANTS) test('attention heads through the kernel: bit-identical to attentionHead (GQA, odd head sizes, positions, paged tables)' + variant(fma), () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const rand = mulberry32(21);
  const cap = 48;
  // Block tables: one block of everything, blocks of 1, and of 4 scattered with some runs of consecutive ids
  // (the kernel runs over each stretch of consecutive rows at once), starting past a few other entries.
  const tables: [number, Int32Array][] = [
    [cap, Int32Array.from([0])],
    [1, Int32Array.from({ length: cap }, (_, i) => cap - 1 - i)],
    [4, Int32Array.from([7, 7, 5, 6, 0, 3, 1, 2, 11, 9, 10, 4, 8])],
  ];
  // d: blocks of 8 only (16, 64), none (5, 7), blocks then a pair (10) or pairs and an odd one (13).
  for (const [nH, nKv, d] of [[4, 2, 16], [2, 1, 7], [3, 3, 5], [8, 2, 64], [2, 1, 13], [4, 1, 10]] as const) {
    for (const pos of [0, 1, 6, 33]) {
      for (const [bs, table] of tables) {
        const tOff = bs === 4 ? 2 : 0;
        const kc = arena.f32Reusable(cap * nKv * d);
        const vc = arena.f32Reusable(cap * nKv * d);
        const q = arena.f32(nH * d + 3);
        for (const a of [kc, vc, q]) for (let i = 0; i < a.length; i++) a[i] = rand() * 4 - 2;
        const got = arena.f32(nH * d + 3);
        const want = new Float32Array(nH * d + 3);
        for (let h = 0; h < nH; h++) {
          attentionHeadSimd(k, got, 3, q, 3, kc, vc, table, tOff, bs, pos, h, nH, nKv, d, arena.f64(cap), arena.f64(d));
          attentionHead(want, 3, q, 3, kc, vc, table, tOff, bs, pos, h, nH, nKv, d, new Float64Array(cap), new Float64Array(d));
        }
        assert.ok(bytes(got).equals(bytes(want)), `heads ${nH}/${nKv} d ${d} pos ${pos} blocks of ${bs}`);
        arena.free(kc);
        arena.free(vc);
      }
    }
  }
});

test('reusable arena blocks (KV caches) are recycled: zeroed, and the memory stops growing', () => {
  const arena = new WasmArena(1);
  const cycle = (n: number): void => {
    const a = arena.f32Reusable(n);
    assert.ok(a.every((v) => v === 0));
    assert.ok(arena.holds(a));
    a.fill(7);
    arena.free(a);
    assert.ok(!arena.holds(a));
  };
  for (let i = 0; i < 20; i++) cycle(1000 + 37 * i);
  const size = arena.memory.buffer.byteLength;
  for (let i = 0; i < 200; i++) cycle(1000 + ((i * 37) % 740));
  assert.equal(arena.memory.buffer.byteLength, size);
});

test('the arena grows without moving or losing arrays handed out before', () => {
  const arena = new WasmArena(1);
  const a = arena.f32(1000);
  a.fill(3.5);
  const big = arena.f32(300_000); // past the first page: the memory grows
  big.fill(1);
  assert.ok(arena.memory.buffer.byteLength >= 1_204_000);
  assert.ok(a.every((v) => v === 3.5));
  const k = simdKernel(arena.memory);
  const y = arena.f32(1);
  const { yTab, xTab } = new TabStage(arena).linear(y, big, 1, 1, 1000);
  k.linearAt(yTab, a.byteOffset, xTab, 1, 1000, 0, 1);
  assert.equal(y[0], 3500);
  assert.ok(arena.holds(a) && arena.holds(big) && !arena.holds(new Float32Array(4)));
});

/** Per step logits + routing bytes, then counter and bank digest, of a run with maps and swaps. */
async function trace(spec: ModelSpec, weights: ModelWeights, threads: number, simd: boolean, placement: BankPlacement | undefined, batches: number[][][], decode: number): Promise<Buffer[]> {
  const b: CpuBackend = createCpuBackend(spec, weights, { threads, simd, placement });
  try {
    await b.ready();
    assert.equal(b.simd, simd);
    const run = recordRun(b, batches, decode, { swapsPerStep: 3, seed: 42, token: (f, i, s) => f * 5 + i * 17 + s, counted: () => true });
    return [...run.steps, run.counter, Buffer.from(run.digest)];
  } finally {
    b.dispose();
  }
}

async function compareSimd(spec: ModelSpec, weights: ModelWeights, placements: [string, BankPlacement | undefined][], batches: number[][][], decode: number): Promise<void> {
  for (const [name, placement] of placements) {
    const want = await trace(spec, weights, 1, false, placement, batches, decode);
    for (const threads of [1, 2]) {
      const calls = simdKernelCalls();
      const got = await trace(spec, weights, threads, true, placement, batches, decode);
      assert.ok(simdKernelCalls() > calls, `${name}, ${threads} threads: the SIMD kernel never ran`);
      assert.equal(got.length, want.length);
      got.forEach((g, i) => assert.ok(g.equals(want[i]!), `${name}, ${threads} threads: ${i < want.length - 2 ? `step ${i}` : 'counter/digest'} differs with SIMD on`));
    }
  }
}

test('synthetic model: SIMD on is bit-identical to SIMD off (1 and 2 threads, batch 1 and 4, maps, swaps)', async () => {
  // hiddenSize 66 and headDim 10: dot products with tails (n % 4 = 2).
  const { spec, weights } = syntheticModel({ seed: 3, numExperts: 12, topK: 3, vocabSize: 700, hiddenSize: 66, headDim: 10, expertIntermediate: 20, numLayers: 2 });
  const placements: [string, BankPlacement | undefined][] = [
    ['all hot', undefined],
    ['4 hot', { hotPerLayer: 4 }],
  ];
  await compareSimd(spec, weights, placements, [[[3, 1, 4, 1, 5, 9]], [[2, 7, 1], [8, 2, 8, 1, 8], [2], [8, 4]]], 5);
});

test('real model: SIMD on is bit-identical to SIMD off (1 and 2 threads, batch 1 and 4, 40 hot, swaps)', { skip: !existsSync(MODEL) && `no model at ${MODEL}` }, async () => {
  const { spec, weights } = await loadModel(MODEL);
  const prompts = [[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12], [5, 6, 7], [42, 4242]];
  await compareSimd(spec, weights, [['all hot', undefined], ['40 hot', { hotPerLayer: 40 }]], [prompts.slice(0, 1), prompts], 4);
});

test('simd option and RESIDENCY_CPU_SIMD', () => {
  const { spec, weights } = syntheticModel();
  const saved = process.env.RESIDENCY_CPU_SIMD;
  try {
    delete process.env.RESIDENCY_CPU_SIMD;
    assert.equal(createCpuBackend(spec, weights).simd, true); // the default where WebAssembly SIMD runs
    assert.equal(createCpuBackend(spec, weights, { simd: true }).simd, true);
    assert.equal(createCpuBackend(spec, weights, { simd: false }).simd, false);
    process.env.RESIDENCY_CPU_SIMD = '1';
    assert.equal(createCpuBackend(spec, weights).simd, true);
    assert.equal(createCpuBackend(spec, weights, { simd: false }).simd, false);
    process.env.RESIDENCY_CPU_SIMD = '0';
    assert.equal(createCpuBackend(spec, weights).simd, false);
    process.env.RESIDENCY_CPU_SIMD = 'fast';
    assert.throws(() => createCpuBackend(spec, weights), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_ARGUMENT' && /RESIDENCY_CPU_SIMD fast: expected 1 or 0/.test(e.message));
    // Weights past the wasm memory: the JS path by default, a clear error when asked for.
    delete process.env.RESIDENCY_CPU_SIMD;
    assert.equal(resolveSimd(undefined, 4 * 2 ** 30), false);
    assert.throws(() => resolveSimd(true, 4 * 2 ** 30), (e: unknown) => e instanceof ResidencyError && e.code === 'NOT_AVAILABLE' && /RESIDENCY_CPU_SIMD=0/.test(e.message));
    assert.equal(resolveSimd(undefined, 1 << 20), true);
  } finally {
    if (saved === undefined) delete process.env.RESIDENCY_CPU_SIMD;
    else process.env.RESIDENCY_CPU_SIMD = saved;
  }
});
