// The CPU backend computing from quantized weights as stored: the quantized linear layer and experts are
// bit-identical to the float32 ops over the dequantized matrices (odd shapes, partial FP8 blocks, batches,
// token pairs, gpt-oss's clamped experts), a whole block-FP8 model matches its dequantized float32 twin byte
// for byte with one and two threads and SIMD on and off, and the banks move blocks and scales losslessly.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { dequantize, isQuantized, type Fp8Matrix, type Matrix, type Mxfp4Matrix, type QuantMatrix } from '../../model/quant.ts';
import { linear } from './linalg.ts';
import { clampedSwigluExpert, swigluExpert, swigluExpertPair } from './moe-ops.ts';
import { computeQuantUnits, linearQ, quantExpert, type QuantExpert } from './quant-linear.ts';
import { CpuExpertBanks } from './banks.ts';
import { sharedAlloc } from './alloc.ts';
import { CpuThreadPool } from './parallel/pool.ts';
import { PICK, UNIT } from './expert-units.ts';
import { mulberry32 } from '../../util/rng.ts';
import { withTempDir } from '../../model/test-helpers.ts';
import { syntheticConfig, writeSyntheticCheckpoint } from '../../model/synthetic.ts';
import { loadModel } from '../../model/load.ts';
import type { ExpertWeights, ModelWeights } from '../../model/weights.ts';
import { createCpuBackend, type CpuBackendOptions } from './cpu-backend.ts';
import { bytesOf, recordFresh } from './test-helpers.ts';
import { simdAvailable } from './wasm/kernel.ts';

const rand = mulberry32(11);

function fp8(rows: number, cols: number, block: [number, number]): Fp8Matrix {
  const data = Uint8Array.from({ length: rows * cols }, () => {
    const b = Math.floor(rand() * 256);
    return (b & 0x7f) === 0x7f ? 0 : b;
  });
  const scales = Float32Array.from({ length: Math.ceil(rows / block[0]) * Math.ceil(cols / block[1]) }, () => 0.001 + rand() * 0.01);
  return { format: 'fp8', rows, cols, data, scales, block };
}

function mxfp4(rows: number, cols: number): Mxfp4Matrix {
  const data = Uint8Array.from({ length: (rows * cols) / 2 }, () => Math.floor(rand() * 256));
  const scales = Uint8Array.from({ length: (rows * cols) / 32 }, () => 118 + Math.floor(rand() * 12));
  return { format: 'mxfp4', rows, cols, data, scales, block: [1, 32] };
}

function bf16(rows: number, cols: number): QuantMatrix {
  const data = Uint16Array.from({ length: rows * cols }, () => {
    const h = Math.floor(rand() * 65536);
    return (h & 0x7f80) === 0x7f80 ? h ^ 0x4000 : h; // no infinities or NaN
  });
  return { format: 'bf16', rows, cols, data, scales: new Uint8Array(0), block: [1, 1] };
}

const vec = (n: number): Float32Array => Float32Array.from({ length: n }, () => rand() * 2 - 1);

describe('quantized linear layer', () => {
  const shapes: [QuantMatrix, string][] = [
    [fp8(7, 13, [4, 5]), 'fp8 7x13 in blocks of 4x5'],
    [fp8(130, 131, [128, 128]), 'fp8 130x131 in blocks of 128x128'],
    [fp8(9, 6, [1, 1]), 'fp8 9x6 in blocks of 1x1'],
    [fp8(6, 70, [4, 8]), 'fp8 6x70 in blocks of 4x8'],
    [mxfp4(5, 64), 'mxfp4 5x64'],
    [mxfp4(3, 96), 'mxfp4 3x96'],
    [bf16(5, 67), 'bf16 5x67 (kept as stored)'],
  ];
  for (const [m, what] of shapes) {
    it(`${what}: bit-identical to linear over the dequantized matrix, batches 1 to 5`, () => {
      const w = dequantize(m);
      for (let rows = 1; rows <= 5; rows++) {
        const x = vec(rows * m.cols);
        const want = new Float32Array(rows * m.rows);
        const got = new Float32Array(rows * m.rows);
        linear(want, w, 0, x, rows, m.rows, m.cols);
        linearQ(got, m, x, rows);
        assert.deepEqual(bytesOf(got), bytesOf(want));
      }
    });
  }
});

describe('quantized experts', () => {
  const H = 64;
  const I = 32;
  /** An expert's float32 bank row (gate | up | down | biases) from its matrices. */
  const floatRow = (e: { gate: QuantMatrix; up: QuantMatrix; down: QuantMatrix }, biases: Float32Array[]): Float32Array => {
    const parts = [dequantize(e.gate), dequantize(e.up), dequantize(e.down), ...biases];
    const row = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) (row.set(p, at), (at += p.length));
    return row;
  };
  const formats = [
    ['fp8 (blocks 24 wide: dequantized inside the dot)', () => ({ gate: fp8(I, H, [16, 24]), up: fp8(I, H, [16, 24]), down: fp8(H, I, [16, 24]) })],
    ['fp8 (blocks 10 wide: through a row scratch)', () => ({ gate: fp8(I, H, [3, 10]), up: fp8(I, H, [3, 10]), down: fp8(H, I, [3, 10]) })],
    ['mxfp4', () => ({ gate: mxfp4(I, H), up: mxfp4(I, H), down: mxfp4(H, I) })],
    ['bf16 (kept as stored)', () => ({ gate: bf16(I, H), up: bf16(I, H), down: bf16(H, I) })],
  ] as const;
  for (const [fmt, make] of formats) {
    it(`${fmt} SwiGLU: one token and a pair, bit-identical to the float32 expert`, () => {
      const e = make();
      const row = floatRow(e, []);
      const x = vec(2 * H);
      const act = new Float32Array(2 * I);
      const want = new Float32Array(2 * H);
      const got = new Float32Array(2 * H);
      swigluExpertPair(want, 0, H, row, 0, x, 0, H, H, I, act);
      quantExpert(got, 0, H, e, x, 0, H, H, I, act);
      assert.deepEqual(bytesOf(got), bytesOf(want));
      swigluExpert(want, 0, row, 0, x, H, H, I, act);
      quantExpert(got, 0, -1, e, x, H, -1, H, I, act);
      assert.deepEqual(bytesOf(got.subarray(0, H)), bytesOf(want.subarray(0, H)));
    });
    it(`${fmt} clamped SwiGLU with biases (gpt-oss): bit-identical to the float32 expert`, () => {
      const e = make();
      const [gateBias, upBias, downBias] = [vec(I), vec(I), vec(H)];
      const row = floatRow(e, [gateBias, upBias, downBias]);
      const c = { kind: 'clamped_swiglu', limit: 0.05, alpha: 1.702 } as const; // a limit small enough to clamp
      const x = vec(2 * H);
      const act = new Float32Array(2 * I);
      const want = new Float32Array(2 * H);
      const got = new Float32Array(2 * H);
      clampedSwigluExpert(want, 0, row, 0, x, 0, H, I, c, act);
      clampedSwigluExpert(want, H, row, 0, x, H, H, I, c, act);
      quantExpert(got, 0, H, { ...e, gateBias, upBias, downBias }, x, 0, H, H, I, act, c);
      assert.deepEqual(bytesOf(got), bytesOf(want));
    });
  }
});

/** The weights with every quantized matrix replaced by its dequantized float32 copy. */
function dequantized(w: ModelWeights): ModelWeights {
  const e = (x: ExpertWeights): ExpertWeights => ({ ...x, gate: dequantize(x.gate), up: dequantize(x.up), down: dequantize(x.down) });
  return {
    ...w,
    layers: w.layers.map((l) => ({ ...l, qProj: dequantize(l.qProj), kProj: dequantize(l.kProj), vProj: dequantize(l.vProj), oProj: dequantize(l.oProj), experts: l.experts.map(e) })),
  };
}

describe('a block-FP8 model on the CPU backend', () => {
  // hidden 16, experts 12 wide, blocks of [5, 7]: partial blocks in both dimensions of every matrix.
  const config = syntheticConfig({
    hidden_size: 16, head_dim: 8, moe_intermediate_size: 12, num_experts: 6, num_experts_per_tok: 2,
    quantization_config: { quant_method: 'fp8', weight_block_size: [5, 7] },
  });
  const load = () => withTempDir(async (dir) => {
    await writeSyntheticCheckpoint(dir, { config, shards: 2 });
    return loadModel(dir, { raw: false });
  });
  const batches = [[[1, 2, 3, 40, 50, 17, 99, 102], [7, 7, 7, 30, 80, 12]], [[5, 6]]];
  const sched = { swapsPerStep: 2, seed: 3, token: (f: number, i: number, s: number) => f * 31 + i * 7 + s, counted: () => true };
  const run = async (weights: ModelWeights, spec: Awaited<ReturnType<typeof load>>['spec'], opts: CpuBackendOptions) => {
    const r = await recordFresh(spec, weights, { ...opts, placement: { hotPerLayer: 4 } }, batches, 5, sched);
    return { steps: r.steps, counter: r.counter };
  };

  it('keeps every projection and expert quantized, and matches its dequantized float32 twin byte for byte (1 and 2 threads, SIMD on and off)', async () => {
    const { spec, weights } = await load();
    const all: Matrix[] = weights.layers.flatMap((l) => [l.qProj, l.kProj, l.vProj, l.oProj, ...l.experts.flatMap((e) => [e.gate, e.up, e.down])]);
    assert.ok(all.every(isQuantized));
    const want = await run(dequantized(weights), spec, { threads: 1, simd: false });
    assert.deepEqual(await run(weights, spec, { threads: 1, simd: false }), want);
    assert.deepEqual(await run(weights, spec, { threads: 2, simd: false }), want);
    if (simdAvailable()) {
      assert.deepEqual(await run(weights, spec, { threads: 1, simd: true }), want);
      assert.deepEqual(await run(weights, spec, { threads: 2, simd: true }), want);
    }
  });

  it('the thread pool shares quantized expert units out to its workers, bit-identical to one thread', async () => {
    const { spec, weights } = await load();
    const banks = new CpuExpertBanks(spec, weights.layers, { hotPerLayer: 4 }, { alloc: sharedAlloc });
    const H = spec.hiddenSize;
    const I = spec.expertIntermediate;
    const quant = { rows: banks.quantRows, layout: banks.quant!, rowSize: banks.rowSize, hidden: H, inter: I };
    const pool = new CpuThreadPool({ threads: 2, banks: banks.pieces, quant });
    try {
      await pool.ready();
      // Every row of every bank, once, as single-pick units.
      const list = banks.pieces.flatMap((bank, b) => Array.from({ length: bank.length / banks.rowSize }, (_, r) => [b, r] as const));
      const n = list.length;
      const units = sharedAlloc.i32(n * UNIT);
      const unitPicks = sharedAlloc.i32(n * PICK);
      list.forEach(([b, r], k) => {
        units.set([b, r * banks.rowSize, k, 1], k * UNIT);
        unitPicks.set([k * H, k * H], k * PICK);
      });
      const x = sharedAlloc.f32(n * H);
      x.set(vec(n * H));
      const want = new Float32Array(n * H);
      computeQuantUnits(want, units, unitPicks, 0, n, banks.quantRows, banks.rowSize, x, H, I, new Float32Array(2 * I));
      const before = pool.workerChunks();
      // Until a worker has taken a chunk (on a loaded machine the main thread may claim them all for a while).
      for (let i = 0; i < 500 && (i < 20 || pool.workerChunks() === before); i++) {
        const out = sharedAlloc.f32(n * H);
        pool.quantExperts(out, units, unitPicks, n, x, n, H, I);
        assert.deepEqual(bytesOf(out), bytesOf(want));
      }
      assert.ok(pool.workerChunks() > before, 'no worker took a chunk of quantized units');
    } finally {
      pool.dispose();
    }
  });

  it('a swapped row is computed from the expert now in it: FP8 tables cached for the row\'s view are not reused after swapRows writes another expert\'s scales into it', async () => {
    // Blocks 8 wide (a multiple of 4: the dot reads each block through its cached table, quant-dot.ts dotFp8) and 16
    // tall, so each expert matrix is one block row and a sweep of its rows ends on the block row the next one starts on.
    const wide = syntheticConfig({ ...config, quantization_config: { quant_method: 'fp8', weight_block_size: [16, 8] } });
    const { spec, weights } = await withTempDir(async (dir) => {
      await writeSyntheticCheckpoint(dir, { config: wide, shards: 1 });
      return loadModel(dir, { raw: false });
    });
    const b = createCpuBackend(spec, weights, { threads: 1, placement: { hotPerLayer: 4 } });
    const { hiddenSize: H, expertIntermediate: I } = spec;
    const x = vec(H);
    const act = new Float32Array(2 * I);
    const of = (e: QuantExpert): Buffer => {
      const o = new Float32Array(H);
      quantExpert(o, 0, -1, e, x, 0, -1, H, I, act);
      return bytesOf(o);
    };
    const layer = 1, cold = 1, piece = 2 * layer + 1; // the rows of (layer, cold bank): quantRows[2 layer + 1]
    const view = b.banks.quantRows[piece]![cold]!;
    assert.ok((view.down as Fp8Matrix).block[1] % 4 === 0);
    of(view); // the view's tables, from the expert in the row now
    b.banks.swapRows(layer, 3, cold); // another expert's bytes and scales, into the same view object
    assert.equal(b.banks.quantRows[piece]![cold], view);
    const e = b.banks.expertAt(layer, 'cold', cold);
    assert.deepEqual(of(view), of(weights.layers[layer]!.experts[e]! as QuantExpert), 'the expert swapped in, as computed from its own matrices');
    b.dispose();
  });

  it('banks hold the stored bytes: a swap moves data and scales losslessly, and the digest covers the scales', async () => {
    const { spec, weights } = await load();
    const b = createCpuBackend(spec, weights, { placement: { hotPerLayer: 4 } });
    const banks = b.banks;
    const q = banks.quant!;
    assert.ok(q, 'quantized rows');
    const n = banks.rowSize;
    // A row is the expert's stored bytes: gate, up, down data, then their scales.
    const e = banks.expertAt(1, 'cold', 1);
    const src = weights.layers[1]!.experts[e]!;
    const bytes = (bank: 'hot' | 'cold', row: number): Uint8Array => { const a = banks.row(1, bank, row); return new Uint8Array(a.buffer, a.byteOffset, 4 * n).slice(); };
    const cold = bytes('cold', 1);
    const down = src.down as Fp8Matrix;
    assert.deepEqual(cold.subarray(q.data[2], q.data[2] + down.data.length), down.data);
    assert.deepEqual(cold.subarray(q.scales[2], q.scales[2] + down.scales.byteLength), new Uint8Array(down.scales.buffer, down.scales.byteOffset, down.scales.byteLength));
    const hot = bytes('hot', 3);
    const digest = banks.digest();
    banks.swapRows(1, 3, 1);
    assert.deepEqual(bytes('hot', 3), cold);
    assert.deepEqual(bytes('cold', 1), hot);
    assert.equal(banks.expertAt(1, 'hot', 3), e);
    // The views the experts are computed from follow the bytes.
    assert.deepEqual(banks.quantRows[2]![3]!.down.data, down.data);
    banks.swapRows(1, 3, 1);
    assert.equal(banks.digest(), digest);
    // One scale's low byte changed: another digest; changed back: the same.
    const cold0 = banks.row(0, 'cold', 0);
    const view = new Uint8Array(cold0.buffer, cold0.byteOffset + q.scales[0], 1);
    view[0] ^= 1;
    assert.notEqual(banks.digest(), digest);
    view[0] ^= 1;
    assert.equal(banks.digest(), digest);
    b.dispose();
  });
});
