// Each CPU op on random inputs against a naive float64 implementation written straight from the formula.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dot, linear, linearVec, rmsnorm } from './linalg.ts';
import { argmax } from '../argmax.ts';
import { attention, headNorm, rope, ropeTables } from './attention-ops.ts';
import { softmax, swigluExpert, swigluExpertPair, topk } from './moe-ops.ts';
import { mulberry32 } from './synthetic.ts';

const rand = mulberry32(42);
const randArray = (n: number, scale = 1): Float32Array => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * scale);

function close(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    const err = Math.abs(actual[i]! - expected[i]!) / Math.max(1, Math.abs(expected[i]!));
    assert.ok(err <= tol, `${what}[${i}]: ${actual[i]} vs ${expected[i]} (err ${err})`);
  }
}

test('dot and linear match a float64 reference', () => {
  for (const n of [1, 3, 4, 7, 33]) {
    const a = randArray(n + 2);
    const b = randArray(n + 5);
    let ref = 0;
    for (let i = 0; i < n; i++) ref += a[2 + i]! * b[5 + i]!;
    close([dot(a, 2, b, 5, n)], [ref], 1e-12, `dot n=${n}`);
  }
  const rows = 3, out = 5, inn = 7;
  const w = randArray(out * inn + 4);
  const x = randArray(rows * inn);
  const y = new Float32Array(rows * out);
  linear(y, w, 4, x, rows, out, inn);
  const ref: number[] = [];
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < out; o++) {
      let s = 0;
      for (let i = 0; i < inn; i++) s += w[4 + o * inn + i]! * x[r * inn + i]!;
      ref.push(s);
    }
  }
  close(y, ref, 1e-6, 'linear');
  // Batched rows (taken two at a time) are bit-identical to one row at a time.
  for (let r = 0; r < rows; r++) {
    const one = new Float32Array(out);
    linearVec(one, 0, w, 4, x, r * inn, out, inn);
    assert.deepEqual(y.subarray(r * out, r * out + out), one);
  }
});

test('rmsnorm and per-head norm match a float64 reference', () => {
  const n = 16, eps = 1e-6;
  const x = randArray(n * 2, 3);
  const w = randArray(n);
  const out = new Float32Array(n);
  rmsnorm(out, 0, x, n, w, n, eps);
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[n + i]! ** 2;
  const inv = 1 / Math.sqrt(ss / n + eps);
  close(out, Array.from({ length: n }, (_, i) => x[n + i]! * inv * w[i]!), 1e-6, 'rmsnorm');

  const heads = randArray(3 * 8);
  const copy = Float64Array.from(heads);
  const hw = randArray(8);
  headNorm(heads, 0, 3, 8, hw, eps);
  for (let h = 0; h < 3; h++) {
    let s = 0;
    for (let i = 0; i < 8; i++) s += copy[h * 8 + i]! ** 2;
    const r = 1 / Math.sqrt(s / 8 + eps);
    close(heads.subarray(h * 8, h * 8 + 8), Array.from({ length: 8 }, (_, i) => copy[h * 8 + i]! * r * hw[i]!), 1e-6, `head ${h}`);
  }
});

test('rope rotates halves by pos * theta^(-2i/d)', () => {
  const d = 16, theta = 10000;
  const { cos, sin } = ropeTables(d, theta, 50);
  for (const pos of [0, 1, 17, 49]) {
    const x = randArray(d);
    const orig = Float64Array.from(x);
    rope(x, 0, d, cos, sin, pos);
    const ref = new Float64Array(d);
    for (let i = 0; i < d / 2; i++) {
      const a = pos * Math.pow(theta, (-2 * i) / d);
      ref[i] = orig[i]! * Math.cos(a) - orig[i + d / 2]! * Math.sin(a);
      ref[i + d / 2] = orig[i + d / 2]! * Math.cos(a) + orig[i]! * Math.sin(a);
    }
    close(x, ref, 1e-5, `rope pos=${pos}`);
  }
});

test('attention is causal GQA softmax(q.k/sqrt(d)) v over the cache, read through a block table', () => {
  const nH = 4, nKv = 2, d = 8, pos = 6, kvW = nKv * d;
  const q = randArray(nH * d);
  const K = randArray((pos + 3) * kvW);
  const V = randArray((pos + 3) * kvW);
  // Positions in blocks of 3, scattered over a pool of 4 blocks (block 1 unused); the table starts at entry 2.
  const bs = 3;
  const table = Int32Array.from([9, 9, 2, 0, 3]);
  const Kp = new Float32Array(4 * bs * kvW).fill(NaN);
  const Vp = new Float32Array(4 * bs * kvW).fill(NaN);
  for (let p = 0; p <= pos; p++) {
    const row = table[2 + Math.floor(p / bs)]! * bs + (p % bs);
    Kp.set(K.subarray(p * kvW, p * kvW + kvW), row * kvW);
    Vp.set(V.subarray(p * kvW, p * kvW + kvW), row * kvW);
  }
  const out = new Float32Array(nH * d);
  attention(out, 0, q, 0, Kp, Vp, table, 2, bs, pos, nH, nKv, d, new Float64Array(16), new Float64Array(d));
  const ref = new Float64Array(nH * d);
  for (let h = 0; h < nH; h++) {
    const kv = Math.floor(h / (nH / nKv)) * d;
    const sc: number[] = [];
    for (let p = 0; p <= pos; p++) {
      let s = 0;
      for (let i = 0; i < d; i++) s += q[h * d + i]! * K[p * kvW + kv + i]!;
      sc.push(s / Math.sqrt(d));
    }
    const m = Math.max(...sc);
    const e = sc.map((s) => Math.exp(s - m));
    const z = e.reduce((a, b) => a + b, 0);
    for (let i = 0; i < d; i++) {
      let acc = 0;
      for (let p = 0; p <= pos; p++) acc += (e[p]! / z) * V[p * kvW + kv + i]!;
      ref[h * d + i] = acc;
    }
  }
  close(out, ref, 1e-6, 'attention');
});

test('router: softmax, top-k in descending order with ties to the lower id, renormalized', () => {
  const logits = Float32Array.from([0.5, 2, -1, 2, 1, 0.5]);
  const probs = new Float32Array(6);
  softmax(probs, 0, logits, 0, 6);
  const z = [...logits].reduce((a, b) => a + Math.exp(b), 0);
  close(probs, [...logits].map((l) => Math.exp(l) / z), 1e-6, 'softmax');
  const ids = new Int32Array(4);
  const w = new Float32Array(4);
  topk(ids, 0, w, 0, probs, 0, 6, 4, true);
  assert.deepEqual([...ids], [1, 3, 4, 0]);
  const kept = [1, 3, 4, 0].map((e) => probs[e]!);
  const sum = kept.reduce((a, b) => a + b, 0);
  close(w, kept.map((p) => p / sum), 1e-6, 'weights');
  topk(ids, 0, w, 0, probs, 0, 6, 4, false);
  close(w, kept, 0, 'unnormalized');
  assert.equal(argmax(Float32Array.from([1, 3, 3, 2]), 0, 4), 1);
});

test('top-k: the same ids and weights as k passes of "largest not taken, first on ties" (ties, -Infinity, NaN, k > n)', () => {
  // The reference: pass j takes the largest value not yet taken (strictly larger wins, so ties go to the lower id).
  const passes = (probs: Float32Array, n: number, k: number, normalize: boolean): [number[], Float32Array] => {
    const ids: number[] = [];
    const w = new Float32Array(k);
    let sum = 0;
    for (let j = 0; j < k; j++) {
      let best = -1;
      let bestP = -Infinity;
      for (let e = 0; e < n; e++) if (probs[e]! > bestP && !ids.includes(e)) [best, bestP] = [e, probs[e]!];
      ids.push(best);
      w[j] = bestP;
      sum += w[j]!;
    }
    if (normalize) for (let j = 0; j < k; j++) w[j] = w[j]! / Math.fround(sum);
    return [ids, w];
  };
  const rand = mulberry32(23);
  for (let t = 0; t < 2000; t++) {
    const n = 1 + Math.floor(rand() * 20);
    const k = 1 + Math.floor(rand() * 8);
    // Few distinct values (many ties), some -Infinity and NaN.
    const probs = Float32Array.from({ length: n }, () => {
      const r = rand();
      return r < 0.05 ? -Infinity : r < 0.08 ? NaN : Math.floor(rand() * 6) / 8;
    });
    for (const normalize of [false, true]) {
      const [wantIds, wantW] = passes(probs, n, k, normalize);
      const ids = new Int32Array(k + 2).fill(99);
      const w = new Float32Array(k + 2).fill(99);
      topk(ids, 1, w, 1, probs, 0, n, k, normalize);
      assert.deepEqual([...ids.subarray(1, k + 1)], wantIds, `probs ${[...probs]} k ${k}`);
      assert.deepEqual(Buffer.from(w.slice(1, k + 1).buffer), Buffer.from(wantW.buffer), `weights of ${[...probs]} k ${k}`);
      assert.equal(ids[0], 99);
      assert.equal(ids[k + 1], 99);
    }
  }
});

test('swiglu expert: down(silu(gate x) * up x) from one bank row', () => {
  const H = 10, I = 6, off = 7;
  const bank = randArray(off + 3 * H * I);
  const x = randArray(H);
  const out = new Float32Array(H);
  swigluExpert(out, 0, bank, off, x, 0, H, I, new Float32Array(I));
  const act: number[] = [];
  for (let j = 0; j < I; j++) {
    let g = 0, u = 0;
    for (let i = 0; i < H; i++) {
      g += bank[off + j * H + i]! * x[i]!;
      u += bank[off + I * H + j * H + i]! * x[i]!;
    }
    act.push((g / (1 + Math.exp(-g))) * u);
  }
  const ref: number[] = [];
  for (let o = 0; o < H; o++) {
    let s = 0;
    for (let j = 0; j < I; j++) s += bank[off + 2 * I * H + o * I + j]! * act[j]!;
    ref.push(s);
  }
  close(out, ref, 1e-5, 'swiglu');
});

test('the paired expert kernel is bit-identical to two single calls', () => {
  const H = 13, I = 7, off = 3;
  const bank = randArray(off + 3 * H * I);
  const x = randArray(3 * H);
  const single = new Float32Array(2 * H);
  swigluExpert(single, 0, bank, off, x, 2 * H, H, I, new Float32Array(I));
  swigluExpert(single, H, bank, off, x, 0, H, I, new Float32Array(I));
  const paired = new Float32Array(2 * H);
  swigluExpertPair(paired, 0, H, bank, off, x, 2 * H, 0, H, I, new Float32Array(2 * I));
  assert.deepEqual(paired, single);
});
