// The host lane's spec (host-expert-spec.ts): its fmaf32 against an exact BigInt reference, its exp against Math.exp.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exactExpf, fmaf32 } from './host-expert-spec.ts';
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
