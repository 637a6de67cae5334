// The INT4 gemv order (int4-spec.ts, defined before its kernel) and the host lane's C dots that repeat it (int4_dot.h,
// built with int4_dot_check.c until the lane's rows take INT4): the C reference loop and the AVX-512 path against the
// spec bit for bit, on rows of every code, fp16 (subnormals too) and bf16 scales of both signs, zero points 0 .. 16 or
// none, groups of 8 to 128, K from one chunk to a round and a partial one, 1 to 5 input vectors at once; the spec's
// weights are quant.ts's Int4Matrix values; and a row of the GPTQ fixture's expert against its float64 dot.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gpuDotInt4, int4Value } from './int4-spec.ts';
import { dequantize, int4Scale, type Int4Matrix } from '../../../model/quant.ts';
import { bf16BitsOf, f16Bits } from '../../../model/int4-pack.ts';
import { loadModel } from '../../../model/load.ts';
import { familyCheckpoint } from '../../../../fixtures/fixture-paths.ts';
import { rng, int, hex } from './float-bits-test-helpers.ts';
import { noCompiler, randomInput } from './test-helpers.ts';

type Fn = (...args: unknown[]) => number;
const dir = mkdtempSync(join(tmpdir(), 'int4-dot-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let dots: Promise<{ run: Fn; simd: boolean }> | null = null;
/** int4_dot_check.c built once with the lane's flags (scripts/build-kernels.mjs hostLaneFlags), through koffi. */
function lib(): Promise<{ run: Fn; simd: boolean }> {
  dots ??= (async () => {
    const src = fileURLToPath(new URL('./int4_dot_check.c', import.meta.url)), out = join(dir, 'int4_dot.so');
    const r = spawnSync(process.env.CC || 'cc', ['-O3', '-std=gnu11', '-ffp-contract=off', '-fno-fast-math', '-fPIC', '-shared', '-pthread', '-o', out, src, '-lm'], { encoding: 'utf8' });
    assert.equal(r.status, 0, `cc failed on host-lane/int4_dot_check.c:\n${r.stderr}`);
    const koffi = (await import('koffi')) as unknown as { load(p: string): { func(proto: string): Fn } };
    const l = koffi.load(out);
    const run = l.func('int he_int4_dots(const uint8_t *w, const uint16_t *srow, const uint8_t *zrow, int bf16, int G, const float *x, int n, int K, _Out_ float *out, int simd)');
    return { run, simd: l.func('int he_simd_available()')() === 1 };
  })();
  return dots;
}

interface Row { w: Uint8Array; scales: Uint16Array; zeros: Uint8Array | null; bf16: boolean; G: number; K: number }

/** A random row: every code, scales of both signs (fp16 from subnormals to 2^5, bf16 2^-40 .. 2^20), zero points 0 .. 16. */
function randomRow(seed: number, K: number, G: number, bf16: boolean, zeros: boolean): Row {
  const r = rng(seed);
  const w = Uint8Array.from({ length: K / 2 }, () => int(r, 0, 255));
  const scales = Uint16Array.from({ length: K / G }, () => {
    const u = r();
    const mag = bf16 ? 2 ** (int(r, -40, 20) + r()) : u < 0.1 ? 2 ** int(r, -24, -15) : 2 ** (int(r, -12, 4) + r());
    const bits = bf16 ? bf16BitsOf(mag) : f16Bits(mag);
    return r() < 0.3 ? bits | 0x8000 : bits;
  });
  return { w, scales, zeros: zeros ? Uint8Array.from({ length: K / G }, () => int(r, 0, 16)) : null, bf16, G, K };
}

function spec(row: Row, x: Float32Array): number {
  return gpuDotInt4(row.w, 0, { scales: row.scales, at: 0, scaleType: row.bf16 ? 'bf16' : 'f16', zeros: row.zeros, group: row.G }, x, row.K);
}

/** Both C paths (the vector one where this CPU and the group take it) against the spec, n inputs at once; whether the vector path ran. */
async function check(row: Row, xs: Float32Array[], what: string): Promise<boolean> {
  const { run, simd } = await lib();
  const x = new Float32Array(xs.length * row.K);
  xs.forEach((v, i) => x.set(v, i * row.K));
  const want = xs.map((v) => spec(row, v));
  let vector = false;
  for (const path of simd && row.G % 32 === 0 ? [0, 1] : [0]) {
    const out = new Float32Array(xs.length);
    assert.equal(run(row.w, row.scales, row.zeros, row.bf16 ? 1 : 0, row.G, x, xs.length, row.K, out, path), 0, `${what}: he_int4_dots refused`);
    out.forEach((v, i) => {
      if (!Object.is(v, want[i]) && !(Number.isNaN(v) && Number.isNaN(want[i]!))) assert.fail(`${what} ${path ? 'vector' : 'scalar'} input ${i}: C ${hex(v)}, spec ${hex(want[i]!)}`);
    });
    vector ||= path === 1;
  }
  return vector;
}

test('INT4 dots: the C reference loop and the AVX-512 path equal the spec bit for bit (groups of 8 .. 128, zero points or none, fp16 and bf16 scales, 1 to 5 inputs, partial rounds)', { skip: noCompiler, timeout: 300_000 }, async (t) => {
  let seed = 480, vectorRuns = 0, cases = 0;
  for (const K of [32, 64, 96, 1024, 2048, 2080, 2880]) {
    for (const G of [8, 16, 32, 64, 128]) {
      if (K % G !== 0) continue;
      for (const [bf16, zeros] of [[false, false], [false, true], [true, false], [true, true]] as const) {
        const row = randomRow(seed++, K, G, bf16, zeros);
        const r = rng(seed++);
        const n = 1 + (seed % 5);
        if (await check(row, Array.from({ length: n }, () => randomInput(r, K)), `K ${K} G ${G} ${bf16 ? 'bf16' : 'fp16'}${zeros ? ' zero points' : ''}`)) vectorRuns++;
        cases++;
      }
    }
  }
  const { simd } = await lib();
  if (!simd) t.diagnostic('no AVX-512 here: the vector path was not compared');
  t.diagnostic(`${cases} rows, ${vectorRuns} through the vector path too`);
  assert.ok(!simd || vectorRuns > 40, `the vector path ran ${vectorRuns} times`);
});

test('INT4 dots: a row of one code at every place, scale 1, zero 8: each weight (q - 8) x the input 2^p at its place, both paths', { skip: noCompiler }, async () => {
  const K = 1056, G = 32; // a round and one chunk: the last chunk alone in the vector path's partial round
  for (let q = 0; q < 16; q++) {
    const row: Row = { w: new Uint8Array(K / 2).fill(q | (q << 4)), scales: new Uint16Array(K / G).fill(0x3c00), zeros: null, bf16: false, G, K };
    const x = Float32Array.from({ length: K }, (_, k) => 2 ** -(k % 20));
    await check(row, [x], `code ${q}`);
    const exact = Array.from(x).reduce((a, v) => a + (q - 8) * v, 0);
    assert.ok(Math.abs(spec(row, x) - exact) <= 1e-5 * Math.max(1, Math.abs(exact)), `code ${q}: ${spec(row, x)} vs ${exact}`);
  }
});

test('the spec\'s weights are the CPU\'s: int4Value of every code and group equals dequantize(Int4Matrix)', () => {
  const row = randomRow(7, 256, 32, false, true);
  const m: Int4Matrix = { format: 'int4', rows: 1, cols: 256, data: row.w, scales: row.scales, scaleType: 'f16', zeros: row.zeros!, block: [1, 32] };
  const w = dequantize(m);
  for (let c = 0; c < 256; c++) {
    const q = (row.w[c >> 1]! >> ((c & 1) * 4)) & 15, g = c >> 5;
    assert.ok(Object.is(int4Value(q, row.zeros![g]!, int4Scale(row.scales[g]!, 'f16')), w[c]), `value ${c}`);
  }
});

test('a real row: the GPTQ fixture\'s expert 3 gate row (K 256, groups of 128), C == spec, and the spec within float32 rounding of the float64 dot of its dequantized weights', { skip: noCompiler }, async () => {
  const { weights } = await loadModel(familyCheckpoint('qwen3-moe-gptq-tiny'), { raw: false });
  const m = weights.layers[1]!.experts[3]!.gate as Int4Matrix;
  assert.equal(m.format, 'int4');
  const K = m.cols, G = m.block[1], groups = K / G;
  const x = randomInput(rng(5), K);
  const w = dequantize(m);
  for (const r of [0, 7, m.rows - 1]) {
    const row: Row = { w: m.data.subarray((r * K) / 2, ((r + 1) * K) / 2), scales: m.scales.subarray(r * groups, (r + 1) * groups), zeros: null, bf16: false, G, K };
    await check(row, [x], `row ${r}`);
    let exact = 0, mag = 0;
    for (let k = 0; k < K; k++) (exact += w[r * K + k]! * x[k]!), (mag += Math.abs(w[r * K + k]! * x[k]!));
    assert.ok(Math.abs(spec(row, x) - exact) <= 2 ** -20 * mag, `row ${r}: ${spec(row, x)} vs ${exact}`);
  }
});
