// linear_tab_bf16 / linear_tab1_bf16: bf16 weight rows kept as stored, widened in registers, bit-identical to the
// JS loops over the widened float32 rows (linalg.ts `linearRows`) and to quant-linear.ts `linearQ` over the
// Bf16Matrix (the bf16-stored spec): random bit patterns (subnormals, -0, both signs, every exponent but the
// non-finite one), every inDim residue mod 4, odd element offsets (rows not 4-byte aligned), row sub-ranges,
// batches of 1..11 rows, and rows wide enough to take several blocks; and bf16 expert units (wasm/experts.ts) against
// quant-linear.ts computeQuantUnits, with gate and up joined in the row and apart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WasmArena } from './arena.ts';
import { simdFma, simdKernel, simdKernelCalls } from './kernel.ts';
import { TabStage } from './stage.ts';
import { linearRows } from '../linalg.ts';
import { computeQuantUnits, linearQ } from '../quant-linear.ts';
import { PICK, UNIT } from '../expert-units.ts';
import { computeExpertUnitsSimd, expertScratch } from './experts.ts';
import { mulberry32 } from '../synthetic.ts';
import { bytesOf as bytes } from '../test-helpers.ts';
import type { Bf16Matrix } from '../../../model/quant.ts';

const VARIANTS = simdFma() ? [false, true] : [false];
const variant = (fma: boolean): string => (fma ? ' (fused multiply-add)' : ' (multiply, add)');

/** n bf16 values in the arena starting at element `off` of a 4-byte-aligned block (odd off: 2-byte aligned rows). */
function bf16In(arena: WasmArena, off: number, n: number): Uint16Array {
  const block = arena.f32(Math.ceil((off + n) / 2) + 1);
  return new Uint16Array(block.buffer, block.byteOffset + 2 * off, n);
}

/** Random finite bf16 patterns: any sign, exponents 0 (zero, subnormal) to 254, some exact zeros. */
function fillBf16(a: Uint16Array, rand: () => number): void {
  for (let i = 0; i < a.length; i++) {
    const r = rand();
    if (r < 0.05) a[i] = rand() < 0.5 ? 0 : 0x8000;
    else a[i] = (rand() < 0.5 ? 0x8000 : 0) | (Math.floor(rand() * 255) << 7) | Math.floor(rand() * 128);
  }
}

function widen(a: Uint16Array): Float32Array {
  const bits = new Uint32Array(a.length);
  for (let i = 0; i < a.length; i++) bits[i] = a[i]! << 16;
  return new Float32Array(bits.buffer);
}

function fillF32(a: Float32Array, rand: () => number): void {
  for (let i = 0; i < a.length; i++) a[i] = rand() < 0.05 ? 0 : (rand() * 2 - 1) * 10 ** Math.floor(rand() * 8 - 4);
}

const matrix = (data: Uint16Array, rows: number, cols: number): Bf16Matrix => ({ format: 'bf16', rows, cols, data, scales: new Uint8Array(0), block: [1, 1] });

for (const fma of VARIANTS) test('bf16 kernel vs the JS loops over the widened rows and linearQ: bit-identical on random shapes, tails, odd offsets, row ranges and batches' + variant(fma), () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const stage = new TabStage(arena);
  const rand = mulberry32(21);
  const calls = simdKernelCalls();
  for (let t = 0; t < 300; t++) {
    const rows = 1 + Math.floor(rand() * 11);
    const outDim = 1 + Math.floor(rand() * 20);
    const inDim = 1 + Math.floor(rand() * 70);
    const off = Math.floor(rand() * 4);
    const w = bf16In(arena, off, outDim * inDim);
    fillBf16(w, rand);
    const x = arena.f32(rows * inDim);
    fillF32(x, rand);
    const y = arena.f32(rows * outDim).fill(-1);
    const wide = widen(w);
    const o0 = t % 3 === 0 ? 0 : Math.floor(rand() * outDim);
    const o1 = t % 3 === 0 ? outDim : o0 + Math.floor(rand() * (outDim - o0 + 1));
    const want = new Float32Array(rows * outDim).fill(-1);
    linearRows(want, wide, 0, x, rows, outDim, inDim, o0, o1);
    const { yTab, xTab } = stage.linear(y, x, rows, outDim, inDim);
    k.linearBf16At(yTab, w.byteOffset, xTab, rows, inDim, o0, o1);
    assert.ok(bytes(y).equals(bytes(want)), `rows ${rows} out [${o0}, ${o1}) of ${outDim} in ${inDim} off ${off}`);
    if (o0 === 0 && o1 === outDim) {
      const spec = new Float32Array(rows * outDim);
      linearQ(spec, matrix(w, outDim, inDim), x, rows);
      assert.ok(bytes(y).equals(bytes(spec)), `linearQ: rows ${rows} out ${outDim} in ${inDim}`);
    }
  }
  assert.equal(simdKernelCalls() - calls, 300);
});

for (const fma of VARIANTS) test('bf16 kernel: wide rows go in several blocks of output rows (and a sub-range across them), bit-identical' + variant(fma), () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory, fma);
  const stage = new TabStage(arena);
  const rand = mulberry32(22);
  // 128 KiB of weights a block: 13 rows of 5001 bf16 values, so 29 rows make three blocks.
  for (const [rows, outDim, inDim, o0, o1] of [[5, 29, 5001, 0, 29], [4, 29, 5001, 5, 27], [1, 40, 4096, 0, 40], [1, 40, 4097, 3, 37]] as const) {
    const w = bf16In(arena, 1, outDim * inDim);
    fillBf16(w, rand);
    const x = arena.f32(rows * inDim);
    fillF32(x, rand);
    const y = arena.f32(rows * outDim).fill(-1);
    const want = new Float32Array(rows * outDim).fill(-1);
    linearRows(want, widen(w), 0, x, rows, outDim, inDim, o0, o1);
    const { yTab, xTab } = stage.linear(y, x, rows, outDim, inDim);
    k.linearBf16At(yTab, w.byteOffset, xTab, rows, inDim, o0, o1);
    assert.ok(bytes(y).equals(bytes(want)), `rows ${rows} out [${o0}, ${o1}) of ${outDim} in ${inDim}`);
  }
});

for (const fma of VARIANTS) test('bf16 expert units through the kernel: bit-identical to quant-linear.ts computeQuantUnits, up apart from gate (a gap in the row) and joined, units of 1..5 picks' + variant(fma), () => {
  const rand = mulberry32(23);
  for (const [H, I] of [[21, 5], [16, 6]] as const) {
    const arena = new WasmArena();
    const k = simdKernel(arena.memory, fma);
    const stage = new TabStage(arena);
    const align4 = (n: number): number => Math.ceil(n / 4) * 4;
    const mat = 2 * I * H;
    const [gate, up, down] = [0, align4(mat), 2 * align4(mat)];
    const rowSize = align4(3 * align4(mat)) / 4; // words
    const E = 4;
    const bank = arena.f32(E * rowSize);
    const rows = Array.from({ length: E }, (_, e) => {
      const at = bank.byteOffset + 4 * e * rowSize;
      const view = (off: number, r: number, c: number): Bf16Matrix => {
        const data = new Uint16Array(bank.buffer, at + off, r * c);
        fillBf16(data, rand);
        return matrix(data, r, c);
      };
      return { gate: view(gate, I, H), up: view(up, I, H), down: view(down, H, I) };
    });
    const layout = { gate, up, down, bf16: true };
    // Units: expert e with e + 1 picks (1..4), then expert 0 again with 5; pick p reads x row p, writes out row p.
    const counts = [1, 2, 3, 4, 5];
    const picks = counts.reduce((a, b) => a + b, 0);
    const units = arena.i32(counts.length * UNIT);
    const unitPicks = arena.i32(picks * PICK);
    let first = 0;
    counts.forEach((c, u) => {
      units.set([0, (u % E) * rowSize, first, c], u * UNIT);
      for (let j = 0; j < c; j++) unitPicks.set([(first + j) * H, (first + j) * H], (first + j) * PICK);
      first += c;
    });
    const x = arena.f32(picks * H);
    fillF32(x, rand);
    const want = new Float32Array(picks * H);
    computeQuantUnits(want, units, unitPicks, 0, counts.length, [rows], rowSize, x, H, I, new Float32Array(2 * I));
    const out = arena.f32(picks * H);
    computeExpertUnitsSimd(k, expertScratch(arena, I), out, units, unitPicks, 0, counts.length, [bank], stage.promote(x, picks * H), H, I, layout);
    assert.ok(bytes(out).equals(bytes(want)), `H ${H} I ${I} (${up === gate + mat ? 'joined' : 'gate and up apart'})`);
  }
});
