// The CPU backend on a small random model: a naive float64 forward, map invariance, swaps, digest, counting.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCpuBackend, type CpuBackend } from './cpu-backend.ts';
import { mulberry32, syntheticModel } from './synthetic.ts';
import { randomMap } from './test-helpers.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { ModelWeights } from '../../model/weights.ts';
import { dequantize, type Matrix } from '../../model/quant.ts';
import { ResidencyError } from '../../errors.ts';
import { DirectSequences } from '../sequences.ts';

const model = syntheticModel({ seed: 7, numExperts: 16, topK: 4 });

/** The whole model, one sequence, every value a float64, straight from the formulas. Returns last logits. */
function referenceForward(spec: ModelSpec, w: ModelWeights, tokens: number[]): Float64Array {
  const H = spec.hiddenSize, d = spec.headDim, nH = spec.numHeads, nKv = spec.numKvHeads, E = spec.numExperts;
  const I = spec.expertIntermediate, eps = spec.rmsNormEps;
  const mv = (M: Matrix, x: ArrayLike<number>, out: number, inn: number): number[] => {
    const W = dequantize(M);
    return Array.from({ length: out }, (_, o) => {
      let s = 0;
      for (let i = 0; i < inn; i++) s += W[o * inn + i]! * x[i]!;
      return s;
    });
  };
  const norm = (x: number[], g: Float32Array): number[] => {
    const r = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length + eps);
    return x.map((v, i) => v * r * g[i]!);
  };
  const ropeAt = (x: number[], pos: number): number[] => {
    const out = x.slice();
    for (let i = 0; i < d / 2; i++) {
      const a = pos * Math.pow(spec.ropeTheta, (-2 * i) / d);
      out[i] = x[i]! * Math.cos(a) - x[i + d / 2]! * Math.sin(a);
      out[i + d / 2] = x[i + d / 2]! * Math.cos(a) + x[i]! * Math.sin(a);
    }
    return out;
  };
  const embed = dequantize(w.embed);
  let xs = tokens.map((t) => Array.from(embed.subarray(t * H, t * H + H)));
  for (const lw of w.layers) {
    const ks: number[][][] = [];
    const vs: number[][][] = [];
    const qs: number[][][] = [];
    xs.forEach((x, p) => {
      const xn = norm(x, lw.inputNorm);
      const q = mv(lw.qProj, xn, nH * d, H);
      const k = mv(lw.kProj, xn, nKv * d, H);
      const v = mv(lw.vProj, xn, nKv * d, H);
      qs.push(Array.from({ length: nH }, (_, h) => ropeAt(norm(q.slice(h * d, h * d + d), lw.qNorm), p)));
      ks.push(Array.from({ length: nKv }, (_, h) => ropeAt(norm(k.slice(h * d, h * d + d), lw.kNorm), p)));
      vs.push(Array.from({ length: nKv }, (_, h) => v.slice(h * d, h * d + d)));
    });
    xs = xs.map((x, p) => {
      const attn: number[] = [];
      for (let h = 0; h < nH; h++) {
        const g = Math.floor(h / (nH / nKv));
        const sc = ks.slice(0, p + 1).map((k) => k[g]!.reduce((a, v, i) => a + v * qs[p]![h]![i]!, 0) / Math.sqrt(d));
        const m = Math.max(...sc);
        const e = sc.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let i = 0; i < d; i++) attn.push(e.reduce((a, ep, j) => a + (ep / z) * vs[j]![g]![i]!, 0));
      }
      const h1 = mv(lw.oProj, attn, H, nH * d).map((v, i) => v + x[i]!);
      const hn = norm(h1, lw.postAttnNorm);
      const logits = mv(lw.router, hn, E, H);
      const m = Math.max(...logits);
      const pr = logits.map((l) => Math.exp(l - m));
      const z = pr.reduce((a, b) => a + b, 0);
      const order = pr.map((p, e) => [p / z, e] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, spec.topK);
      const sum = order.reduce((a, [p]) => a + p, 0);
      const out = h1.slice();
      for (const [p, e] of order) {
        const ex = lw.experts[e]!;
        const g = mv(ex.gate, hn, I, H);
        const u = mv(ex.up, hn, I, H);
        const act = g.map((gv, j) => (gv / (1 + Math.exp(-gv))) * u[j]!);
        const y = mv(ex.down, act, H, I);
        const wgt = spec.normTopkProb ? p / sum : p;
        y.forEach((v, i) => (out[i]! += wgt * v));
      }
      return out;
    });
  }
  return Float64Array.from(mv(w.lmHead, norm(xs[xs.length - 1]!, w.finalNorm), spec.vocabSize, H));
}

/** Sequences opened by hand on a backend (one DirectSequences a backend, as a caller keeps one). */
const direct = new WeakMap<CpuBackend, DirectSequences>();
const seqsOf = (b: CpuBackend): DirectSequences => direct.get(b) ?? direct.set(b, new DirectSequences(b)).get(b)!;

function prefill(b: CpuBackend, seq: number, tokens: number[], extra: Partial<{ count: boolean; recordRouting: boolean }> = {}) {
  seqsOf(b).open(seq, 64);
  return seqsOf(b).forward({ chunks: [{ seq, tokens, startPos: 0 }], count: extra.count ?? false, recordRouting: extra.recordRouting });
}

const prompt = [3, 17, 42, 5, 9, 60, 1, 33, 12, 7];

test('forward matches a naive float64 forward of the whole model', () => {
  const b = createCpuBackend(model.spec, model.weights);
  const { logits } = prefill(b, 1, prompt);
  const ref = referenceForward(model.spec, model.weights, prompt);
  for (let i = 0; i < ref.length; i++) assert.ok(Math.abs(logits[i]! - ref[i]!) < 1e-4, `logit ${i}: ${logits[i]} vs ${ref[i]}`);
});

test('prefill in chunks, token by token, or batched with other sequences gives bit-identical logits', () => {
  const whole = prefill(createCpuBackend(model.spec, model.weights), 1, prompt).logits;
  const b = createCpuBackend(model.spec, model.weights);
  const s = seqsOf(b);
  s.open(1, 64);
  s.open(2, 64);
  s.forward({ chunks: [{ seq: 1, tokens: prompt.slice(0, 4), startPos: 0 }], count: false });
  let out = s.forward({ chunks: [{ seq: 1, tokens: prompt.slice(4, 9), startPos: 4 }, { seq: 2, tokens: [8, 8], startPos: 0 }], count: false });
  out = s.forward({ chunks: [{ seq: 2, tokens: [9], startPos: 2 }, { seq: 1, tokens: prompt.slice(9), startPos: 9 }], count: false });
  assert.deepEqual(out.logits.subarray(model.spec.vocabSize), whole);
});

test('the map never changes a result: all hot, first-H hot, a random map, and after random swaps', () => {
  const { spec, weights } = model;
  const ref = prefill(createCpuBackend(spec, weights), 1, prompt).logits;
  const placements = [{ hotPerLayer: 12 }, { hotPerLayer: 0 }, randomMap(spec, 12, 3)];
  for (const placement of placements) {
    const b = createCpuBackend(spec, weights, { placement });
    assert.deepEqual(prefill(b, 1, prompt).logits, ref);
    assert.ok(b.lastColdPicks > 0, 'some picks were cold');
  }
  const b = createCpuBackend(spec, weights, { placement: randomMap(spec, 12, 4) });
  const before = b.banks.digest();
  const rand = mulberry32(9);
  const done: [number, number, number][] = [];
  for (let i = 0; i < 40; i++) {
    const s: [number, number, number] = [Math.floor(rand() * spec.numLayers), Math.floor(rand() * 12), Math.floor(rand() * 4)];
    b.banks.swapRows(...s);
    done.push(s);
  }
  assert.notEqual(b.banks.digest(), before, 'digest changes with swaps');
  for (let l = 0; l < spec.numLayers; l++) {
    for (let e = 0; e < spec.numExperts; e++) {
      const slot = b.banks.slotOf(l, e);
      assert.equal(b.banks.expertAt(l, slot < 12 ? 'hot' : 'cold', slot < 12 ? slot : slot - 12), e);
    }
  }
  assert.deepEqual(prefill(b, 1, prompt).logits, ref);
  for (const s of done.reverse()) b.banks.swapRows(...s);
  assert.equal(b.banks.digest(), before, 'digest returns after swapping back');
});

test('a swap moves the bytes and the slots of both experts', () => {
  const b = createCpuBackend(model.spec, model.weights, { placement: { hotPerLayer: 10 } });
  const [e1, e2] = [b.banks.expertAt(1, 'hot', 3), b.banks.expertAt(1, 'cold', 2)];
  assert.deepEqual([e1, e2], [3, 12]);
  b.banks.swapRows(1, 3, 2);
  assert.deepEqual([b.banks.slotOf(1, 3), b.banks.slotOf(1, 12)], [12, 3]);
  assert.deepEqual(b.banks.row(1, 'hot', 3).subarray(0, 12 * 32), model.weights.layers[1]!.experts[12]!.gate);
  assert.throws(() => b.banks.swapRows(1, 10, 0), ResidencyError);
});

test('a bad map is refused with the field named', () => {
  const { spec, weights } = model;
  const m = randomMap(spec, 12, 5);
  const dup = { ...m, layers_map: [m.layers_map[0]!, { hot: m.layers_map[1]!.hot, cold: [...m.layers_map[1]!.cold.slice(1), m.layers_map[1]!.hot[0]!] }] };
  assert.throws(() => createCpuBackend(spec, weights, { placement: dup }), /layers_map\[1\]: expert \d+ appears more than once/);
  assert.throws(() => createCpuBackend(spec, weights, { placement: { ...m, hot_per_layer: 11 } }), /hot_per_layer = 11/);
  assert.throws(() => createCpuBackend(spec, weights, { placement: { hotPerLayer: 17 } }), /hotPerLayer 17/);
});

test('the counter is the histogram of routed picks of counted steps, untouched by uncounted ones', () => {
  const { spec, weights } = model;
  const b = createCpuBackend(spec, weights, { placement: randomMap(spec, 12, 6) });
  const hist = new Uint32Array(spec.numLayers * spec.numExperts);
  const add = (routing: Int32Array): void => {
    for (let i = 0; i < routing.length; i++) {
      const layer = Math.floor(i / spec.topK) % spec.numLayers;
      hist[layer * spec.numExperts + routing[i]!]!++;
    }
  };
  const out = prefill(b, 1, prompt, { count: true, recordRouting: true });
  add(out.routing!);
  assert.deepEqual(b.readCounter(), hist);
  seqsOf(b).open(2, 64);
  seqsOf(b).forward({ chunks: [{ seq: 2, tokens: [4, 5, 6], startPos: 0 }], count: false });
  assert.deepEqual(b.readCounter(), hist, 'uncounted step leaves the counter alone');
  const dec = seqsOf(b).forward({ chunks: [{ seq: 1, tokens: [11], startPos: 10 }, { seq: 2, tokens: [12], startPos: 3 }], count: true, recordRouting: true });
  add(dec.routing!);
  assert.deepEqual(b.readCounter(), hist);
  const total = hist.reduce((a, v) => a + v, 0);
  assert.equal(total, (prompt.length + 2) * spec.numLayers * spec.topK);
  const copy = b.readCounter();
  copy[0] = 999;
  assert.notEqual(b.readCounter()[0], 999, 'readCounter returns a copy');
});

test('recordRouting returns ids in descending weight and weights summing to 1', () => {
  const b = createCpuBackend(model.spec, model.weights);
  const { routing, routingWeights } = prefill(b, 1, prompt, { recordRouting: true });
  const K = model.spec.topK;
  assert.equal(routing!.length, prompt.length * model.spec.numLayers * K);
  for (let r = 0; r < routing!.length; r += K) {
    const w = routingWeights!.subarray(r, r + K);
    assert.ok(Math.abs(w.reduce((a, v) => a + v, 0) - 1) < 1e-5);
    for (let k = 1; k < K; k++) assert.ok(w[k - 1]! >= w[k]!);
    assert.equal(new Set(routing!.subarray(r, r + K)).size, K);
  }
});

test('bad steps are refused, naming what is wrong, before anything changes', () => {
  const b = createCpuBackend(model.spec, model.weights, { kvCache: { blockSize: 4, blocks: 8 } });
  const p = b.spec.maxPositions;
  const bad: [object, RegExp][] = [
    [{ seq: 2, tokens: [1], startPos: 0 }, /seq 2 has no blockTable/],
    [{ seq: 1, tokens: [1], startPos: 4, blockTable: [0] }, /blockTable holds 1 blocks; positions up to 4 need 2 of 4/],
    [{ seq: 1, tokens: [1], startPos: 0, blockTable: [8] }, /blockTable\[0\] = 8 is not a block in \[0, 8\)/],
    [{ seq: 1, tokens: [1], startPos: -1, blockTable: [0] }, /positions -1\.\.-1 are not in/],
    [{ seq: 1, tokens: [1], startPos: p, blockTable: [0] }, new RegExp(`positions ${p}\\.\\.${p} are not in \\[0, ${p}\\)`)],
    [{ seq: 1, tokens: [64], startPos: 0, blockTable: [0] }, /token 64/],
  ];
  for (const [chunk, message] of bad) assert.throws(() => b.forward({ chunks: [chunk as never], count: false }), message);
  assert.throws(() => b.forward({ chunks: [{ seq: 1, tokens: [1], startPos: 0, blockTable: [3] }, { seq: 2, tokens: [1, 2], startPos: 2, blockTable: [3] }], count: false }), /block 3 is written by two chunks/);
  assert.throws(() => b.copyBlocks([[0, 1], [2, 8]]), /dst block 8 is not in \[0, 8\)/);
});
