// The host lane's spec (lane-spec.ts): its fmaf32 against an exact BigInt reference, its exp against Math.exp,
// its MXFP4 dot against the gemv's loops as gemv.cuh writes them, its clamped SwiGLU against its formula.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exactExpf, exactSwigluClamped, fmaf32, gpuDotMxfp4, mxfp4Value } from './lane-spec.ts';
import { bitsOf, fromBits, isNaNBits, rng, int, sign, f32With, hex } from './float-bits-test-helpers.ts';

// ---- The exact reference of fmaf: every float32 is an integer times 2^-149, a product of two an integer times 2^-298 ----

/** v = m * 2^e exactly, m a signed BigInt. */
function decompose(v: number): { m: bigint; e: number } {
  const b = bitsOf(v), ex = (b >>> 23) & 0xff, frac = b & 0x7fffff;
  const m = BigInt(ex === 0 ? frac : frac | 0x800000);
  return { m: b >>> 31 ? -m : m, e: ex === 0 ? -149 : ex - 150 };
}

/** N * 2^-298 rounded to float32, nearest and ties to even; N = 0 gives `zero`. */
function roundScaled(N: bigint, zero: number): number {
  if (N === 0n) return zero;
  const M = N < 0n ? -N : N;
  const E = M.toString(2).length - 1 - 298;
  const q = Math.max(E - 23, -149);
  const shift = BigInt(q + 298);
  let Q = M >> shift;
  const R = M - (Q << shift), half = 1n << (shift - 1n);
  if (R > half || (R === half && (Q & 1n) === 1n)) Q += 1n;
  const mag = Number(Q) * 2 ** q;
  return (N < 0n ? -1 : 1) * (mag >= 2 ** 128 ? Infinity : mag);
}

function fmaRef(a: number, b: number, c: number): number {
  if ([a, b, c].some(Number.isNaN)) return NaN;
  const pInf = !Number.isFinite(a) || !Number.isFinite(b);
  if (pInf && (a === 0 || b === 0)) return NaN;
  const pNeg = (bitsOf(a) ^ bitsOf(b)) >>> 31 === 1;
  if (pInf) return !Number.isFinite(c) && c < 0 !== pNeg ? NaN : pNeg ? -Infinity : Infinity;
  if (!Number.isFinite(c)) return c;
  const A = decompose(a), B = decompose(b), C = decompose(c);
  const N = ((A.m * B.m) << BigInt(A.e + B.e + 298)) + (C.m << BigInt(C.e + 298));
  const bothNegZero = a * b === 0 && pNeg && c === 0 && bitsOf(c) >>> 31 === 1;
  return roundScaled(N, bothNegZero ? -0 : 0);
}

/** Checks fmaf32 on the triples; returns how many a float64 multiply-add rounded to float32 gets wrong. */
function checkFma(triples: Iterable<[number, number, number]>, what: string): { n: number; naiveWrong: number } {
  let n = 0, naiveWrong = 0;
  for (const [a, b, c] of triples) {
    const want = bitsOf(fmaRef(a, b, c)), got = bitsOf(fmaf32(a, b, c));
    if (!(got === want || (isNaNBits(got) && isNaNBits(want)))) {
      assert.fail(`${what}: fmaf32(${hex(a)}, ${hex(b)}, ${hex(c)}) = ${hex(fromBits(got))}, exact ${hex(fromBits(want))}`);
    }
    if (bitsOf(Math.fround(a * b + c)) !== want) naiveWrong++;
    n++;
  }
  return { n, naiveWrong };
}

function* repeat<T>(n: number, f: () => T): Generator<T> {
  for (let i = 0; i < n; i++) yield f();
}

test('the BigInt reference rounds as float32 does where a float64 sum is exact', () => {
  const r = rng(1);
  for (let i = 0; i < 20000; i++) {
    const a = f32With(r, int(r, -60, 60)), b = f32With(r, int(r, -60, 60));
    // two float32 values whose exponents are close add exactly in float64: one rounding, Math.fround's
    assert.equal(bitsOf(fmaRef(a, 1, b)), bitsOf(Math.fround(a + b)));
    assert.equal(bitsOf(fmaRef(a, b, 0)), bitsOf(Math.fround(a * b)));
  }
  assert.equal(fmaRef(2 ** -149, 0.5, 0), 0, 'half the least subnormal is a tie: to even, zero');
  assert.equal(fmaRef(2 ** -149, 0.75, 0), 2 ** -149);
  assert.equal(fmaRef(2 ** 127, 2, 0), Infinity);
});

test('fmaf32 on random bit patterns, zeros, infinities and NaN', () => {
  const r = rng(2);
  const anyBits = () => fromBits(int(r, 0, 0xffffffff));
  checkFma(repeat(30000, (): [number, number, number] => [anyBits(), anyBits(), anyBits()]), 'random bits');
  // Exponents in a band where products and addends overlap, including the overflow threshold.
  checkFma(repeat(30000, (): [number, number, number] => {
    const ea = int(r, -70, 70), eb = int(r, -70, 70);
    return [f32With(r, ea), f32With(r, eb), f32With(r, Math.min(127, Math.max(-126, ea + eb + int(r, -30, 30))))];
  }), 'overlapping');
  const specials = [0, -0, 1, -1, 2 ** -149, -(2 ** -149), 3.4028234663852886e38, -3.4028234663852886e38, Infinity, -Infinity, NaN, 1.5, 2 ** -126];
  const all: [number, number, number][] = [];
  for (const a of specials) for (const b of specials) for (const c of specials) all.push([a, b, c]);
  checkFma(all, 'specials');
  assert.ok(Object.is(fmaf32(-0, 1, -0), -0) && Object.is(fmaf32(0, -1, -0), -0) && Object.is(fmaf32(-0, -1, -0), 0), 'a zero sum is -0 only when both terms are -0');
  assert.ok(Object.is(fmaf32(1.5, 2, -3), 0) && Object.is(fmaf32(-1.5, 2, 3), 0), 'an exact cancellation is +0');
  assert.ok(Object.is(fmaf32(-(2 ** -100), 2 ** -60, 0), -0), 'an underflow keeps its sign');
});

test('fmaf32 under cancellation and on subnormal results', () => {
  const r = rng(3);
  checkFma(repeat(30000, (): [number, number, number] => {
    const a = f32With(r, int(r, -60, 60)), b = f32With(r, int(r, -60, 60));
    const p = Math.fround(a * b);
    return [a, b, fromBits(bitsOf(-p) + int(r, -4, 4))]; // c within a few ulps of -a*b
  }), 'cancellation');
  checkFma(repeat(30000, (): [number, number, number] => {
    const ea = int(r, -120, -20);
    const a = f32With(r, ea), b = f32With(r, int(r, -150 - ea, -125 - ea));
    const c = r() < 0.3 ? 0 : fromBits(int(r, 0, 0x00ffffff) | (r() < 0.5 ? 0x80000000 : 0)); // subnormal or small normal
    return [a, b, c];
  }), 'subnormal');
});

test('fmaf32 where a float64 sum lands on a float32 midpoint (double rounding)', () => {
  const r = rng(4);
  // p = f1 * f2 * 2^k with f1 * f2 an odd 25-bit number: a float32 midpoint; c a tiny push either way (or none).
  const atMidpoint = (): [number, number, number] => {
    if (r() < 0.2) {
      // A subnormal midpoint: an odd multiple of 2^-150.
      const k1 = int(r, -149, -1);
      return [sign(r) * (2 * int(r, 0, 2047) + 1) * 2 ** k1, sign(r) * (2 * int(r, 0, 1023) + 1) * 2 ** (-150 - k1), r() < 0.3 ? 0 : sign(r) * 2 ** -149 * int(r, 0, 5)];
    }
    const f1 = 2 * int(r, 1, 2047) + 1;
    const f2 = 2 * int(r, Math.ceil(2 ** 24 / f1 / 2), Math.floor((2 ** 25 - 1) / f1 / 2) - 1) + 1;
    const top = int(r, -126, 127); // p's exponent: 2^top <= |p| < 2^(top+1), up to the overflow threshold
    const k1 = int(r, Math.max(-149, top - 128), Math.min(116, top + 125)), k2 = top - 24 - k1;
    const a = sign(r) * f1 * 2 ** k1, b = sign(r) * f2 * 2 ** k2;
    if (Math.fround(a) !== a || Math.fround(b) !== b || !Number.isFinite(a * b)) return [1, 1, 0];
    const cExp = Math.max(-149, top - int(r, 26, 80));
    const c = r() < 0.15 ? 0 : Math.fround(sign(r) * 2 ** cExp * (1 + r()));
    return [a, b, c];
  };
  const mid = checkFma(repeat(60000, atMidpoint), 'midpoints');
  // p = u/2 (1 - t^2 2^-46) beside c of ulp u: c + p rounds to c, a float64 sum to the midpoint c + u/2.
  const besideUlp = (): [number, number, number] => {
    const e = int(r, -126, 126);
    const c = f32With(r, e), u = 2 ** Math.max(e - 23, -149), t = int(r, 1, 200);
    const k = Math.log2(u) - 1, i = int(r, Math.max(-126, k + 1 - 126), Math.min(126, k + 126));
    const a = 2 ** i * (1 + t * 2 ** -23), b = 2 ** (k - i) * (1 - t * 2 ** -23);
    if (Math.fround(a) !== a || Math.fround(b) !== b) return [1, 1, 0];
    return [Math.sign(c) * a * sign(r), sign(r) * b, c];
  };
  const near = checkFma(repeat(60000, besideUlp), 'beside an ulp');
  assert.ok(mid.naiveWrong > 1000 && near.naiveWrong > 1000, `the cases bite: Math.fround(a * b + c) wrong on ${mid.naiveWrong} of ${mid.n} and ${near.naiveWrong} of ${near.n}`);
  // The overflow threshold's midpoint 2^128 - 2^103 = 18631 * 1801 * 2^103: a push below it gives the largest float.
  const [a, b, FLT_MAX] = [18631 * 2 ** 60, 1801 * 2 ** 43, 3.4028234663852886e38];
  for (const s of [1, -1]) {
    assert.equal(fmaf32(s * a, b, -s * 2 ** 70), s * FLT_MAX, 'below the threshold: finite');
    assert.equal(fmaf32(s * a, b, 0), s * Infinity, 'on it: to even, infinity');
    assert.equal(fmaf32(s * a, b, s * 2 ** 70), s * Infinity);
  }
});

// ---- exp ----

test('exactExpf is within 2 ulp of e^x on [-87, 88]; outside it 0 or infinity', (t) => {
  const r = rng(5);
  const xs = [-87, 88, 0, -0, 1, -1, 2 ** -149, 0.5, -0.5, Math.fround(Math.LN2), Math.fround(-Math.LN2), 87.5, -86.5];
  for (let i = 0; i < 100000; i++) xs.push(Math.fround(-87 + 175 * r()));
  for (let i = 0; i < 20000; i++) xs.push(f32With(r, int(r, -40, 6)) % 87);
  let worst = 0, worstX = 0;
  for (const x of xs) {
    const want = Math.exp(x), got = exactExpf(x);
    const ulp = 2 ** (((bitsOf(Math.fround(want)) >>> 23) & 0xff) - 150);
    const err = Math.abs(got - want) / ulp;
    if (err > worst) [worst, worstX] = [err, x];
  }
  t.diagnostic(`exactExpf: worst ${worst.toFixed(3)} ulp from Math.exp over ${xs.length} points, at x = ${worstX}`);
  assert.ok(worst <= 2, `worst ${worst.toFixed(3)} ulp at x = ${hex(worstX)}`);
  const next = (v: number, d: number) => fromBits(bitsOf(v) + d); // d ulps away from zero
  assert.equal(exactExpf(next(88, 1)), Infinity);
  assert.ok(Number.isFinite(exactExpf(88)) && exactExpf(88) > 1e38, 'e^88 is finite');
  assert.ok(Object.is(exactExpf(next(-87, 1)), 0), 'below -87: +0');
  assert.ok(exactExpf(-87) > 1e-38, 'e^-87 is not flushed');
  assert.ok(Number.isNaN(exactExpf(NaN)), 'NaN stays NaN');
  assert.equal(exactExpf(0), 1);
  assert.equal(exactExpf(-0), 1);
});

// ---- MXFP4 ----

/** An fp16's value (fp4x8_scaled widens E2M1 codes through fp16 bits: s << 15 | em << 9 is the value x 2^-14). */
function halfValue(h: number): number {
  const e = (h >> 10) & 31, m = h & 1023, v = e ? (1024 + m) * 2 ** (e - 25) : m * 2 ** -24;
  return h & 0x8000 ? -v : v;
}

/** product.cuh's fp4x8_scaled as written: 8 codes of a word widened through fp16, scaled in one step (s <= 240) or two. */
function fp4x8Scaled(word: number, s: number): number[] {
  const one = s <= 240, sc = 2 ** ((one ? s + 14 : s) - 127), pre = one ? 1 : 16384;
  const f = new Array<number>(8);
  for (let k = 0; k < 4; k++) {
    const t = word >>> (4 * k);
    const h = (((t & 0x00080008) << 12) | ((t & 0x00070007) << 9)) >>> 0;
    const lo = halfValue(h & 0xffff), hi = halfValue(h >>> 16);
    f[k] = Math.fround(Math.fround(lo * pre) * sc);
    f[4 + k] = Math.fround(Math.fround(hi * pre) * sc);
  }
  return f;
}

/**
 * The gemv's MXFP4 sums as gemv.cuh runs them for a batch of B rows: K staged in chunks of KC = 16384 / B values
 * (COMBINE_KC 2,048 for the combining product); lane l loads chunks c = l, l + 32, ... of each K chunk, widens a word at
 * a time (fp4x8_scaled) and adds dot_word_mxfp4 into its sum; then warp_sum's shuffles (v += shfl_xor(v, o)).
 */
function gemvMxfp4(w: Uint8Array, scales: Uint8Array, x: Float32Array, K: number, KC: number): number {
  const lanes = new Array<number>(32).fill(0);
  for (let k0 = 0; k0 < K; k0 += KC) {
    const chunks = Math.min(KC, K - k0) / 32;
    for (let lane = 0; lane < 32; lane++) {
      for (let c = lane; c < chunks; c += 32) {
        const sc = scales[(k0 >> 5) + c]!;
        for (let i = 0; i < 4; i++) {
          const at = (k0 + 32 * c) / 2 + 4 * i, word = (w[at]! | (w[at + 1]! << 8) | (w[at + 2]! << 16) | (w[at + 3]! << 24)) >>> 0;
          const f = fp4x8Scaled(word, sc), xv = k0 + 32 * c + 8 * i;
          let d = Math.fround(f[0]! * x[xv]!);
          for (let e = 1; e < 8; e++) d = fmaf32(f[e]!, x[xv + e]!, d);
          lanes[lane] = Math.fround(lanes[lane]! + d);
        }
      }
    }
  }
  let v = lanes;
  for (let o = 16; o > 0; o >>= 1) v = v.map((a, l) => Math.fround(a + v[l ^ o]!));
  return v[0]!;
}

test('MXFP4 weights: every code times every scale byte the uploads keep (0 .. 252) as fp4x8_scaled widens them, exact', () => {
  for (let s = 0; s <= 252; s++) {
    for (let n = 0; n < 16; n++) {
      const word = n * 0x11111111 >>> 0; // code n at all 8 places
      const f = fp4x8Scaled(word, s);
      for (const v of f) assert.ok(Object.is(v, mxfp4Value(n, s)), `code ${n} scale ${s}: ${v} against ${mxfp4Value(n, s)}`);
    }
  }
  assert.equal(mxfp4Value(1, 0), 2 ** -128, 'a subnormal weight');
  assert.ok(Object.is(mxfp4Value(8, 127), -0), 'code 8 is -0');
  assert.equal(mxfp4Value(7, 252), 6 * 2 ** 125);
});

test('gpuDotMxfp4 is the gemv\'s MXFP4 order at every batch (K chunks of 16,384 / B values, and the combining product\'s 2,048)', () => {
  const r = rng(9);
  for (const K of [32, 96, 1024, 1056, 2880, 4096 + 320]) {
    for (let t = 0; t < 3; t++) {
      const w = Uint8Array.from({ length: K / 2 }, () => int(r, 0, 255));
      const scales = Uint8Array.from({ length: K / 32 }, () => (r() < 0.05 ? int(r, 0, 2) : r() < 0.05 ? int(r, 241, 252) : int(r, 110, 135)));
      const x = Float32Array.from({ length: K }, () => (r() < 0.1 ? sign(r) * 0 : f32With(r, int(r, -30, 4))));
      const want = gpuDotMxfp4(w, 0, scales, 0, x, K);
      for (const KC of [16384, 8192, 4096, 2048, 1024]) {
        const got = gemvMxfp4(w, scales, x, K, KC);
        assert.ok(Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want)), `K ${K} KC ${KC}: gemv ${hex(got)}, spec ${hex(want)}`);
      }
    }
  }
});

test('exactSwigluClamped: gate clamped above at the limit, up to [-limit, limit], a NaN sum giving way to the bound; within a few ulp of its formula', () => {
  const L = 7, A = 1.702;
  const f = (g: number, u: number): number => {
    const gc = Math.min(g, L), uc = Math.min(Math.max(u, -L), L);
    return (uc + 1) * gc / (1 + Math.exp(-Math.fround(Math.fround(A) * gc))); // e^ of the float32 product, as the kernels take it
  };
  const r = rng(10);
  for (let i = 0; i < 20000; i++) {
    const g = Math.fround(-30 + 60 * r()), u = Math.fround(-30 + 60 * r());
    const got = exactSwigluClamped(g, u, L, A), want = f(g, u);
    assert.ok(Math.abs(got - want) <= 8 * 2 ** -24 * Math.abs(want) + 2 ** -140, `(${g}, ${u}): ${got} against ${want}`);
  }
  assert.equal(exactSwigluClamped(100, 100, L, A), exactSwigluClamped(7, 7, L, A), 'both past the limit: clamped');
  assert.equal(exactSwigluClamped(3, -100, L, A), exactSwigluClamped(3, -7, L, A));
  assert.equal(exactSwigluClamped(NaN, NaN, L, A), exactSwigluClamped(7, -7, L, A), 'fminf(NaN, limit) is the limit; fmaxf(NaN, -limit) is -limit');
  assert.ok(Object.is(exactSwigluClamped(-200, 2, L, A), -0), 'a gate far below: sigmoid 0, the unit -0');
  assert.ok(Object.is(exactSwigluClamped(0, 0, L, A), 0));
});
