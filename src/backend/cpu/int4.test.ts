// The CPU backend computing 4-bit weights as stored (GPTQ, AWQ, compressed-tensors, repacked into Int4Matrix): the
// linear layer and experts bit-identical to the float32 ops over the dequantized matrices (groups a multiple of 4 wide
// through the fused dot, others through a row scratch; zero points or not; fp16 and bf16 scales), each format's fixture
// bit-identical to its dequantized float32 twin with one and two threads and SIMD on and off (loaded and streamed into
// the banks alike), worker threads sharing the 4-bit expert units out, and the banks moving values, scales and zero
// points losslessly; a corrupt expert refused as the banks stream it in; CUDA refusing 4-bit models by name.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { dequantize, isQuantized, type Int4Matrix, type Matrix } from '../../model/quant.ts';
import { linear } from './linalg.ts';
import { swigluExpert, swigluExpertPair, clampedSwigluExpert } from './moe-ops.ts';
import { computeQuantUnits, linearQ, quantExpert } from './quant-linear.ts';
import { CpuExpertBanks } from './banks.ts';
import { sharedAlloc } from './alloc.ts';
import { CpuThreadPool } from './parallel/pool.ts';
import { PICK, UNIT } from './expert-units.ts';
import { mulberry32 } from '../../util/rng.ts';
import { rejectsWith, withTempDir } from '../../model/test-helpers.ts';
import { writeSyntheticCheckpoint } from '../../model/synthetic.ts';
import type { TensorToWrite } from '../../model/safetensors-writer.ts';
import { parseConfig } from '../../model/config.ts';
import { checkCudaSupport } from '../cuda/support.ts';
import { loadModel } from '../../model/load.ts';
import { loadModelFor } from '../load-for.ts';
import type { ExpertWeights, ModelWeights } from '../../model/weights.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { createCpuBackend, type CpuBackendOptions } from './cpu-backend.ts';
import { bytesOf, recordFresh } from './test-helpers.ts';
import { simdAvailable } from './wasm/kernel.ts';
import { INT4_FORMATS, int4FixtureConfig, writeInt4Fixture, type Int4FixtureFormat } from '../../model/int4-fixture.ts';
import { bf16BitsOf, f16Bits } from '../../model/int4-pack.ts';

const rand = mulberry32(48);

/**
 * A random [rows][cols] INT4 matrix in groups of `group`: every code, scales of both signs over a wide range (fp16 down
 * to subnormals, bf16 up to 2^100), zero points 0 .. 16 when it has them.
 */
function int4(rows: number, cols: number, group: number, scaleType: 'f16' | 'bf16', zeros: boolean): Int4Matrix {
  const groups = (rows * cols) / group;
  const data = Uint8Array.from({ length: (rows * cols) / 2 }, () => Math.floor(rand() * 256));
  const scales = Uint16Array.from({ length: groups }, () => {
    const mag = scaleType === 'f16' ? (rand() < 0.1 ? 2 ** -20 : 2 ** (-10 + 14 * rand())) : 2 ** (-30 + 130 * rand());
    const bits = scaleType === 'f16' ? f16Bits(mag) : bf16BitsOf(mag);
    return rand() < 0.2 ? bits | 0x8000 : bits;
  });
  const z = zeros ? Uint8Array.from({ length: groups }, () => Math.floor(rand() * 17)) : new Uint8Array(0);
  return { format: 'int4', rows, cols, data, scales, scaleType, zeros: z, block: [1, group] };
}

const vec = (n: number): Float32Array => Float32Array.from({ length: n }, () => rand() * 2 - 1);

describe('4-bit linear layer', () => {
  const shapes: [Int4Matrix, string][] = [
    [int4(5, 64, 32, 'f16', false), '5x64, groups of 32, symmetric, fp16 scales'],
    [int4(7, 96, 32, 'bf16', false), '7x96, groups of 32, symmetric, bf16 scales'],
    [int4(6, 128, 128, 'f16', true), '6x128, one group a row, zero points'],
    [int4(3, 48, 8, 'f16', true), '3x48, groups of 8, zero points'],
    [int4(4, 40, 20, 'bf16', true), '4x40, groups of 20, zero points'],
    [int4(5, 24, 2, 'f16', true), '5x24, groups of 2 (through a row scratch)'],
    [int4(3, 56, 14, 'bf16', false), '3x56, groups of 14 (through a row scratch)'],
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

  it('a value is (q - z) x s exactly: the dequantized matrix is exact in float32', () => {
    const m = int4(4, 64, 16, 'bf16', true);
    const w = dequantize(m);
    const exact = new Float64Array(w.length);
    for (let r = 0; r < 4; r++) {
      for (let c = 0; c < 64; c++) {
        const g = r * 4 + (c >> 4);
        const s = new Float32Array(new Uint32Array([m.scales[g]! << 16]).buffer)[0]!;
        exact[r * 64 + c] = (((m.data[(r * 64 + c) >> 1]! >> ((c & 1) * 4)) & 15) - m.zeros[g]!) * s;
      }
    }
    assert.deepEqual([...w], [...exact]);
  });
});

describe('4-bit experts', () => {
  const H = 64;
  const I = 32;
  const floatRow = (e: { gate: Matrix; up: Matrix; down: Matrix }, biases: Float32Array[] = []): Float32Array => {
    const parts = [dequantize(e.gate), dequantize(e.up), dequantize(e.down), ...biases];
    const row = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) (row.set(p, at), (at += p.length));
    return row;
  };
  for (const [what, G, zeros] of [['groups of 32, zero points', 32, true], ['groups of 16, symmetric', 16, false], ['groups of 2 (row scratch)', 2, true]] as const) {
    it(`${what}: SwiGLU on one token and a pair, and the clamped SwiGLU with biases, bit-identical to the float32 expert`, () => {
      const e = { gate: int4(I, H, G, 'f16', zeros), up: int4(I, H, G, 'f16', zeros), down: int4(H, I, G, 'f16', zeros) };
      const row = floatRow(e);
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
      const [gateBias, upBias, downBias] = [vec(I), vec(I), vec(H)];
      const c = { kind: 'clamped_swiglu', limit: 0.05, alpha: 1.702 } as const;
      const biased = floatRow(e, [gateBias, upBias, downBias]);
      clampedSwigluExpert(want, 0, biased, 0, x, 0, H, I, c, act);
      clampedSwigluExpert(want, H, biased, 0, x, H, H, I, c, act);
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

const batches = [[[1, 2, 3, 40, 50, 17, 99, 102], [7, 7, 7, 30, 80, 12]], [[5, 6]]];
const sched = { swapsPerStep: 2, seed: 3, token: (f: number, i: number, s: number) => f * 31 + i * 7 + s, counted: () => true };
const run = async (spec: ModelSpec, weights: ModelWeights, opts: CpuBackendOptions) => {
  const r = await recordFresh(spec, weights, { ...opts, placement: { hotPerLayer: 3 } }, batches, 5, sched);
  return { steps: r.steps, counter: r.counter };
};

type Loaded = Awaited<ReturnType<typeof loadModel>>;
/**
 * `body` over a fixture loaded two ways: its experts as matrices (loadModel), and left in the checkpoint for the banks to
 * stream in (loadModelFor cpu; the files exist until `body` is done).
 */
function withFixture<T>(format: Int4FixtureFormat, body: (m: { loaded: Loaded; streamed: Loaded }) => Promise<T>): Promise<T> {
  return withTempDir(async (dir) => {
    await writeInt4Fixture(dir, format);
    return body({ loaded: await loadModel(dir, { raw: false }), streamed: await loadModelFor(dir, 'cpu') });
  });
}

for (const format of INT4_FORMATS) {
  describe(`the ${format} fixture on the CPU backend`, () => {
    it('keeps every projection and expert in 4 bits and matches its dequantized float32 twin byte for byte (loaded and streamed; 1 and 2 threads; SIMD on and off)', async () => {
      await withFixture(format, async ({ loaded, streamed }) => {
        const { spec, weights } = loaded;
        const all: Matrix[] = weights.layers.flatMap((l) => [l.qProj, l.kProj, l.vProj, l.oProj, ...l.experts.flatMap((e) => [e.gate, e.up, e.down])]);
        assert.ok(all.every((m) => isQuantized(m) && m.format === 'int4'));
        assert.ok(streamed.weights.layers.every((l) => l.experts.every((e) => e.stored?.int4)), 'the experts streamed');
        const want = await run(spec, dequantized(weights), { threads: 1, simd: false });
        assert.deepEqual(await run(spec, weights, { threads: 1, simd: false }), want);
        assert.deepEqual(await run(spec, streamed.weights, { threads: 1, simd: false }), want);
        assert.deepEqual(await run(spec, weights, { threads: 2, simd: false }), want);
        if (simdAvailable()) {
          assert.deepEqual(await run(spec, streamed.weights, { threads: 1, simd: true }), want);
          assert.deepEqual(await run(spec, streamed.weights, { threads: 2, simd: true }), want);
        }
      });
    });
  });
}

describe('4-bit banks', () => {
  it('a NaN scale of an expert left in the checkpoint is refused as the banks read it in, naming the tensor', async () => {
    await withTempDir(async (dir) => {
      const scales = 'model.layers.1.mlp.experts.2.down_proj.scales';
      const nan = (ts: TensorToWrite[]) => ts.map((t) => (t.name === scales ? { ...t, bytes: t.bytes.map((b, i) => (i === 6 ? 0x01 : i === 7 ? 0x7c : b)) } : t));
      await writeSyntheticCheckpoint(dir, { config: int4FixtureConfig('awq'), shards: 2, seed: 48, edit: nan });
      const m = await loadModelFor(dir, 'cpu'); // the experts stay in the checkpoint until the banks read them
      await rejectsWith(() => createCpuBackend(m.spec, m.weights, { threads: 1 }), 'BAD_CHECKPOINT', /"model\.layers\.1\.mlp\.experts\.2\.down_proj\.scales": the scale of output 3 group 0 is NaN/);
    });
  });

  it('the CUDA backend refuses a 4-bit model by name, before the device', () => {
    assert.throws(() => checkCudaSupport(parseConfig(int4FixtureConfig('awq'), 'x')), /cuda backend: 4-bit awq weights are not on CUDA yet; use --backend cpu/);
  });

  it('the thread pool shares 4-bit expert units out to its workers, bit-identical to one thread', async () => {
    const { spec, weights } = await withFixture('gptq-zp', async ({ loaded }) => loaded);
    const banks = new CpuExpertBanks(spec, weights.layers, { hotPerLayer: 3 }, { alloc: sharedAlloc });
    const H = spec.hiddenSize;
    const I = spec.expertIntermediate;
    const quant = { rows: banks.quantRows, layout: banks.quant!, rowSize: banks.rowSize, hidden: H, inter: I };
    const pool = new CpuThreadPool({ threads: 2, banks: banks.pieces, quant });
    try {
      await pool.ready();
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
      for (let i = 0; i < 500 && (i < 20 || pool.workerChunks() === before); i++) {
        const out = sharedAlloc.f32(n * H);
        pool.quantExperts(out, units, unitPicks, n, x, n, H, I);
        assert.deepEqual(bytesOf(out), bytesOf(want));
      }
      assert.ok(pool.workerChunks() > before, 'no worker took a chunk of 4-bit units');
    } finally {
      pool.dispose();
    }
  });

  it('a row is the expert\'s values, scales and zero points as repacked; a swap moves all three losslessly and the digest covers the zero points', async () => {
    await withFixture('awq', async ({ loaded, streamed }) => {
      const b = createCpuBackend(loaded.spec, loaded.weights, { threads: 1, placement: { hotPerLayer: 3 } });
      const s = createCpuBackend(streamed.spec, streamed.weights, { threads: 1, placement: { hotPerLayer: 3 } });
      try {
        const banks = b.banks;
        const q = banks.quant!;
        assert.deepEqual(q.shapes.map((m) => [m.format, m.scaleType, m.zeroCount]), [['int4', 'f16', 64], ['int4', 'f16', 64], ['int4', 'f16', 64]]);
        assert.equal(s.banks.digest(), banks.digest(), 'streamed rows are the loaded matrices\' bytes');
        const n = banks.rowSize;
        const e = banks.expertAt(1, 'cold', 1);
        const src = loaded.weights.layers[1]!.experts[e]!.down as Int4Matrix;
        const bytes = (bank: 'hot' | 'cold', row: number): Uint8Array => { const a = banks.row(1, bank, row); return new Uint8Array(a.buffer, a.byteOffset, 4 * n).slice(); };
        const cold = bytes('cold', 1);
        assert.deepEqual(cold.subarray(q.data[2], q.data[2] + src.data.length), src.data);
        assert.deepEqual(cold.subarray(q.scales[2], q.scales[2] + 2 * src.scales.length), new Uint8Array(src.scales.buffer, src.scales.byteOffset, src.scales.byteLength));
        assert.deepEqual(cold.subarray(q.zeros[2], q.zeros[2] + src.zeros.length), src.zeros);
        const hot = bytes('hot', 2);
        const digest = banks.digest();
        banks.swapRows(1, 2, 1);
        assert.deepEqual(bytes('hot', 2), cold);
        assert.deepEqual(bytes('cold', 1), hot);
        assert.deepEqual((banks.quantRows[2]![2]!.down as Int4Matrix).zeros, src.zeros);
        banks.swapRows(1, 2, 1);
        assert.equal(banks.digest(), digest);
        const cold0 = banks.row(0, 'cold', 0);
        const zero = new Uint8Array(cold0.buffer, cold0.byteOffset + q.zeros[1], 1);
        zero[0] ^= 1;
        assert.notEqual(banks.digest(), digest);
        zero[0] ^= 1;
        assert.equal(banks.digest(), digest);
      } finally {
        b.dispose();
        s.dispose();
      }
    });
  });
});
