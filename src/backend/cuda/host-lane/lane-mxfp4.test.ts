// The host expert lane on gpt-oss's MXFP4 experts (host-lane/mxfp4_dot.h through host_experts.c) against its spec
// (lane-spec.ts), bit for bit, on both of its paths: random experts laid out as the banks lay gpt-oss's rows out
// (gate | up interleaved, E8M0 scales, bf16 biases, the clamped SwiGLU), at gpt-oss's H = I = 2,880 (2 rounds of 1,024
// values and a partial one) and small odd shapes; a real row of the shared tiny checkpoint against its dequantized
// float reference; and the threaded lane answering requests on such rows, an expert split with the GPU's side.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { familyCheckpoint } from '../../../../fixtures/fixture-paths.ts';
import { availableParallelism } from 'node:os';
import { expertSpec, gpuDotMxfp4 } from './lane-spec.ts';
import { HostExpertLane, MAILBOX } from './lane.ts';
import { laneRow, type LaneRow } from './lane-row.ts';
import { expertRowLayout } from '../weights/device-weights.ts';
import { loadModel } from '../../../model/load.ts';
import { FP4_VALUES } from '../../../model/quant.ts';
import { rng, int } from './float-bits-test-helpers.ts';
import { assertSameBits, checkExpert, laneBanks, lib, noCompiler, randomInput, type Expert } from './test-helpers.ts';

const CLAMP = { limit: 7, alpha: 1.702 };

/** A gpt-oss bank row's layout at H, I (device-weights.ts gptOssRowLayout's order), the pieces at odd 16-byte gaps. */
function mxfp4Layout(H: number, I: number): { at: LaneRow; bytes: number } {
  const gu = 0, down = gu + I * H + 48, guS = down + (H * I) / 2 + 16, dnS = guS + (2 * I * H) / 32 + 32, guB = dnS + (H * I) / 32 + 16, dnB = guB + 4 * I + 16;
  const at: LaneRow = {
    gate: gu, up: gu + H / 2, down, step: 2,
    e8m0: { gate: guS, up: guS + H / 32, down: dnS },
    bias: { gate: guB, up: guB + 2, down: dnB },
    clamp: CLAMP,
  };
  return { at, bytes: dnB + 2 * H + 16 };
}

/**
 * A random gpt-oss expert: E2M1 codes of every kind (both zeros), E8M0 scales mostly near 2^-4 .. 2^1 with some at 0
 * (subnormal weights) and up to 2^13 (sums far past the clamp's limit, both signs), bf16 biases up to +-16 (and the
 * clamp: gate sums beyond 7, up sums beyond +-7).
 */
function randomMxfp4Expert(seed: number, H: number, I: number, opts: { bias?: boolean; clamp?: boolean } = {}): Expert {
  const r = rng(seed);
  const { at: full, bytes } = mxfp4Layout(H, I);
  const at: LaneRow = { ...full, ...(opts.bias === false ? { bias: undefined } : {}), ...(opts.clamp === false ? { clamp: undefined } : {}) };
  const row = new Uint8Array(bytes);
  for (let i = 0; i < (3 * I * H) / 2 + 48; i++) row[i] = int(r, 0, 255); // the values (and the gap: never read)
  for (const [off, n] of [[full.e8m0!.gate, (2 * I * H) / 32], [full.e8m0!.down, (H * I) / 32]] as const) {
    for (let i = 0; i < n; i++) {
      const u = r();
      row[off + i] = u < 0.02 ? 0 : u < 0.03 ? int(r, 1, 3) : u < 0.06 ? int(r, 128, 140) : int(r, 119, 128);
    }
  }
  const biases = new Uint16Array(row.buffer, full.bias!.gate, 2 * I + 8 + H);
  for (let i = 0; i < biases.length; i++) biases[i] = (r() < 0.5 ? 0x8000 : 0) | ((int(r, 118, 130) << 7) | int(r, 0, 0x7f));
  return { row, at, H, I, x: randomInput(r, H) };
}

/** Gate and up sums (biases added) of an expert's units, as the spec computes them. */
function unitSums(e: Expert): { g: number[]; u: number[] } {
  const K = e.H, s = e.at.e8m0!, bias = new Uint16Array(e.row.slice(e.at.bias!.gate, e.at.bias!.gate + 4 * e.I).buffer);
  const f = new Float32Array(new Uint32Array(bias.length).map((_, i) => bias[i]! << 16).buffer);
  const w = e.row.slice(e.at.gate), sc = e.row.slice(s.gate);
  const dot = (r: number) => gpuDotMxfp4(w, (r * K) / 2, sc, r * (K / 32), e.x, K);
  const g = [], u = [];
  for (let j = 0; j < e.I; j++) {
    g.push(Math.fround(dot(2 * j) + f[2 * j]!));
    u.push(Math.fround(dot(2 * j + 1) + f[2 * j + 1]!));
  }
  return { g, u };
}

// Shapes: gpt-oss's (H = I = 2,880: a row 2 whole rounds of the warp's 32 loads and 26 chunks more), a whole round
// (1,024), and small odd ones (a round's first 2, 3, 5 and 17 chunks: the vector path's second half empty or partial).
for (const [H, I, seeds] of [[2880, 2880, [61]], [1024, 64, [62]], [64, 96, [63, 64]], [96, 160, [65]], [544, 32, [66]]] as const) {
  test(`MXFP4 gpt-oss experts, H ${H}, I ${I} (interleaved gate | up, biases, clamped SwiGLU): the C library's bits equal the spec's, scalar and vector`, { skip: noCompiler, timeout: 300_000 }, async (t) => {
    let pastLimit = 0, below = 0, simdRuns = 0;
    for (const seed of seeds) {
      const e = randomMxfp4Expert(seed, H, I);
      const { g, u } = unitSums(e);
      pastLimit += g.filter((v) => v > CLAMP.limit).length + u.filter((v) => Math.abs(v) > CLAMP.limit).length;
      below += g.filter((v) => v < -CLAMP.limit).length;
      if ((await checkExpert(e, `MXFP4 H ${H} I ${I} seed ${seed}`)).simd) simdRuns++;
    }
    assert.ok(pastLimit > 0 && below > 0, `the clamp bites: ${pastLimit} gate or up sums past the limit, ${below} gate sums below -limit`);
    const L = await lib();
    if (!L.simdAvailable()) t.diagnostic('no AVX-512 here: the vector path was not compared');
    assert.equal(simdRuns, L.simdAvailable() ? seeds.length : 0, 'the vector path takes every MXFP4 shape (a partial last round)');
  });
}

test('MXFP4 experts without biases or clamp (the plain SwiGLU, a missing bias added as +0, none on down), and rows one after the other', { skip: noCompiler }, async () => {
  for (const [H, I] of [[96, 64], [1056, 96]] as const) {
    await checkExpert(randomMxfp4Expert(70 + H, H, I, { bias: false, clamp: false }), `MXFP4 H ${H} I ${I} plain`);
    await checkExpert(randomMxfp4Expert(71 + H, H, I, { bias: false }), `MXFP4 H ${H} I ${I} clamped, no bias`);
    // gate [I][H] then up [I][H], each its own scale rows.
    const e = randomMxfp4Expert(72 + H, H, I);
    const at: LaneRow = { ...e.at, step: 1, up: e.at.gate + (I * H) / 2, e8m0: { ...e.at.e8m0!, up: e.at.e8m0!.gate + (I * H) / 32 }, bias: { ...e.at.bias!, up: e.at.bias!.gate + 2 * I } };
    await checkExpert({ ...e, at }, `MXFP4 H ${H} I ${I} gate then up`);
  }
});

test('MXFP4: every code at every place of a load, through the C library: gate 7 (the limit), up = value(code) x 2^(s - 127) (clamped to +-7), unit j = (up + 1) x 7 sigmoid(7 alpha), scalar and vector', { skip: noCompiler }, async () => {
  const L = await lib();
  const H = 1056, I = 96; // a round and one chunk: the last chunk alone in the vector path's partial round
  const { at, bytes } = mxfp4Layout(H, I);
  const row = new Uint8Array(bytes);
  const x = new Float32Array(H).fill(1);
  row.fill(127, at.e8m0!.gate, at.e8m0!.gate + (2 * I * H) / 32); // 2^0
  row.fill(127, at.e8m0!.down, at.e8m0!.down + (H * I) / 32);
  // Gate row j: one code 6 (value 6) and one 2 (value 1): 7, the limit, at places that move with j. Up row j: code
  // j % 16 at value place (37 j) % H with its scale byte 120 + j % 9 (and 0 for some: subnormal weights).
  for (let j = 0; j < I; j++) {
    const gate = (2 * j * H) / 2, up = ((2 * j + 1) * H) / 2;
    const put = (rowAt: number, v: number, code: number) => { row[rowAt + (v >> 1)] |= code << (4 * (v & 1)); };
    put(gate, (5 * j) % H, 7);
    put(gate, (5 * j + 1) % H, 2);
    const v = (37 * j) % H, s = j % 11 === 3 ? 0 : 120 + (j % 9);
    put(up, v, j % 16);
    row[at.e8m0!.gate + (2 * j + 1) * (H / 32) + Math.floor(v / 32)] = s;
  }
  const want = expertSpec(row, { ...at, bias: undefined }, H, I, x);
  for (const simd of L.simdAvailable() ? [false, true] : [false]) {
    const got = L.expert(row, { ...at, bias: undefined }, H, I, x, simd);
    assertSameBits(got.h, want.h, `simd ${simd} h`);
    assertSameBits(got.y, want.y, `simd ${simd} y`);
  }
  for (let j = 0; j < I; j++) {
    const s = j % 11 === 3 ? 0 : 120 + (j % 9), u = Math.min(Math.max(Math.fround(FP4_VALUES[j % 16]! * 2 ** (s - 127)), -7), 7);
    const glu = Math.fround(7 * Math.fround(1 / Math.fround(1 + Math.exp(-Math.fround(7 * Math.fround(1.702))))));
    const approx = Math.fround(Math.fround(u + 0 + 1) * glu);
    assert.ok(Math.abs(want.h[j]! - approx) <= 4 * 2 ** -23 * Math.abs(approx) + 1e-30, `unit ${j}: ${want.h[j]} ~ ${approx} (code ${j % 16}, scale ${s})`);
  }
});

test('MXFP4: tiny scales (E8M0 bytes 0-4: subnormal weights, scale 0 included) carry into the outputs\' bits (gate sums of ~2^-125 pass the clamped SwiGLU as subnormal units, a down scale of ~2^70 brings them back), scalar and vector', { skip: noCompiler }, async () => {
  const H = 1056, I = 96;
  const e = randomMxfp4Expert(90, H, I, { bias: false });
  const r = rng(91), s = e.at.e8m0!;
  for (let i = 0; i < (2 * I * H) / 32; i++) e.row[s.gate + i] = r() < 0.5 ? 0 : int(r, 1, 4);
  for (let i = 0; i < (H * I) / 32; i++) e.row[s.down + i] = int(r, 190, 200);
  e.x.forEach((v, k) => (e.x[k] = v * 2 ** -24));
  const want = expertSpec(e.row, e.at, H, I, e.x);
  const subnormal = want.h.filter((v) => v !== 0 && Math.abs(v) < 2 ** -126).length;
  assert.ok(subnormal > I / 2, `most units are subnormal (${subnormal} of ${I})`);
  // Read with a scale byte 0 as a zero weight, the outputs would differ: the comparison below sees how 0 is read.
  const zeroed = e.row.slice();
  for (let i = 0; i < (2 * I * H) / 32; i++) if (zeroed[s.gate + i] === 0) zeroed.fill(0, e.at.gate + 16 * i, e.at.gate + 16 * i + 16);
  const other = expertSpec(zeroed, e.at, H, I, e.x);
  assert.ok(other.y.some((v, f) => v !== want.y[f]), 'a scale byte 0 (2^-127) is not a zero weight');
  await checkExpert(e, 'MXFP4 tiny scales');
});

test('MXFP4: NaN gate and up sums (+inf and -inf words in one load) give way to the clamp\'s bounds, gate to +limit and up to -limit, in the C library as in the spec, scalar and vector', { skip: noCompiler }, async () => {
  const L = await lib();
  const H = 64, I = 32;
  const { at, bytes } = mxfp4Layout(H, I);
  const clean = { ...at, bias: undefined };
  const row = new Uint8Array(bytes);
  const x = new Float32Array(H).fill(1);
  row.fill(127, at.e8m0!.gate, at.e8m0!.gate + (2 * I * H) / 32);
  row.fill(127, at.e8m0!.down, at.e8m0!.down + (H * I) / 32);
  // A row's NaN: chunk 0 at scale 2^125, its first word 8 x (+6) (the chain overflows to +inf), its second 8 x (-6)
  // (-inf); the lane's sum inf + -inf. Unit j: gate NaN when j is odd (else 1: one value 1), up NaN when j % 4 < 2
  // (else 0.5).
  const nanRow = (r: number) => { row.fill(0x77, r * (H / 2), r * (H / 2) + 4); row.fill(0xff, r * (H / 2) + 4, r * (H / 2) + 8); row[at.e8m0!.gate + r * (H / 32)] = 252; };
  for (let j = 0; j < I; j++) {
    if (j % 2) nanRow(2 * j); else row[2 * j * (H / 2) + 20] = 0x02; // value 20: 1
    if (j % 4 < 2) nanRow(2 * j + 1); else row[(2 * j + 1) * (H / 2) + 20] = 0x01; // 0.5
  }
  const want = expertSpec(row, clean, H, I, x);
  const sig = (g: number) => Math.fround(1 / Math.fround(1 + Math.exp(-Math.fround(g * Math.fround(CLAMP.alpha)))));
  for (let j = 0; j < I; j++) {
    const g = j % 2 ? CLAMP.limit : 1, u = j % 4 < 2 ? -CLAMP.limit : 0.5;
    const approx = (u + 1) * g * sig(g);
    assert.ok(Math.abs(want.h[j]! - approx) <= 1e-6 * Math.abs(approx), `unit ${j}: ${want.h[j]} ~ ${approx} (gate ${g}, up ${u})`);
  }
  for (const simd of L.simdAvailable() ? [false, true] : [false]) {
    const got = L.expert(row, clean, H, I, x, simd);
    assertSameBits(got.h, want.h, `simd ${simd} h`);
    assertSameBits(got.y, want.y, `simd ${simd} y`);
  }
});

test('MXFP4: a real expert row of the tiny gpt-oss checkpoint (its bank row as the uploads build it): the lane equals its spec and the dequantized float64 expert within float32 rounding', { skip: noCompiler }, async () => {
  const L = await lib();
  const dir = familyCheckpoint('gpt-oss-tiny-mxfp4');
  const { spec, tensors } = await loadModel(dir, { stream: true });
  const layout = expertRowLayout(tensors!, spec);
  const at = laneRow(layout, spec), H = spec.hiddenSize, I = spec.expertIntermediate;
  for (const [l, e] of [[0, 0], [1, 5], [3, 15]] as const) {
    const row = new Uint8Array(layout.bytes);
    for (const s of layout.slices!(l, e)) {
      const t = tensors!.info(s.name), all = new Uint8Array(t.bytes);
      tensors!.read(s.name, all);
      row.set(all.subarray(s.offset, s.offset + s.bytes), s.at);
    }
    const x = randomInput(rng(80 + e), H).map((v) => v / 16);
    const want = expertSpec(row, at, H, I, x);
    for (const simd of L.simdAvailable() ? [false, true] : [false]) {
      const got = L.expert(row, at, H, I, x, simd);
      assertSameBits(got.y, want.y, `layer ${l} expert ${e} simd ${simd} y`);
    }
    // The float64 reference from the stored tensors read as transformers reads them (gate = even rows of gate_up).
    const ref = dequantExpert(row, layout, H, I, x);
    let worst = 0;
    for (let f = 0; f < H; f++) worst = Math.max(worst, Math.abs(want.y[f]! - ref[f]!) / (1e-3 + Math.abs(ref[f]!)));
    assert.ok(worst < 1e-3, `layer ${l} expert ${e}: the lane's output within 1e-3 of the float64 expert (worst ${worst})`);
  }
});

/** gpt-oss's expert in float64 from a bank row (blocks dequantized as quant.ts reads them). */
function dequantExpert(row: Uint8Array, layout: ReturnType<typeof expertRowLayout>, H: number, I: number, x: Float32Array): Float64Array {
  const w = (at: number, sAt: number, r: number, K: number, k: number) => {
    const b = row[at + (r * K + k) / 2 | 0]!, code = k & 1 ? b >> 4 : b & 15;
    return FP4_VALUES[code]! * 2 ** (row[sAt + r * (K / 32) + (k >> 5)]! - 127);
  };
  const bf = (at: number, i: number) => new Float32Array(new Uint32Array([(row[at + 2 * i]! | (row[at + 2 * i + 1]! << 8)) << 16]).buffer)[0]!;
  const dot = (at: number, sAt: number, r: number, K: number, v: ArrayLike<number>) => { let s = 0; for (let k = 0; k < K; k++) s += w(at, sAt, r, K, k) * v[k]!; return s; };
  const h = new Float64Array(I);
  for (let j = 0; j < I; j++) {
    const g = Math.min(dot(layout.gateUpAt, layout.gateUpGridAt, 2 * j, H, x) + bf(layout.gateUpBiasAt, 2 * j), CLAMP.limit);
    const u = Math.min(Math.max(dot(layout.gateUpAt, layout.gateUpGridAt, 2 * j + 1, H, x) + bf(layout.gateUpBiasAt, 2 * j + 1), -CLAMP.limit), CLAMP.limit);
    h[j] = (u + 1) * g / (1 + Math.exp(-CLAMP.alpha * g));
  }
  return Float64Array.from({ length: H }, (_, f) => dot(layout.downAt, layout.downGridAt, f, I, h) + bf(layout.downBiasAt, f));
}

test('the lane\'s threads answer mailbox requests on MXFP4 rows (gpt-oss\'s layout, H 96, I 160: partial rounds), several rows a request and an expert split with the GPU\'s side, with the bits he_expert gives, on both paths', { skip: noCompiler, timeout: 120_000 }, async () => {
  const l = await lib();
  const H = 96, I = 160, layers = 2, hotRows = 3, coldRows = 3;
  const experts = Array.from({ length: layers * coldRows }, (_, i) => randomMxfp4Expert(950 + i, H, I));
  const { rowBytes, driver, bankOf, kept } = laneBanks(l, experts, layers, hotRows, coldRows);
  const at = experts[0]!.at;
  // Scales or biases past the row's end are refused before a thread starts.
  for (const a of [{ ...at, e8m0: { ...at.e8m0!, down: rowBytes - 8 } }, { ...at, bias: { ...at.bias!, down: rowBytes - 4 } }, { ...at, up: rowBytes - H / 2 }]) {
    assert.throws(() => new HostExpertLane(l, driver, bankOf(a), { threads: 1, simd: false, pin: false }), /he_start refused/);
  }
  for (const simd of l.simdAvailable() ? [false, true] : [false]) {
    const lane = new HostExpertLane(l, driver, bankOf(at), { threads: Math.min(3, availableParallelism()), simd, pin: false });
    assert.equal(lane.simd, simd, 'the vector path takes H 96, I 160');
    const mb = (lane as unknown as { mailbox: { host: Uint8Array } }).mailbox.host;
    const y = new Float32Array(mb.buffer, mb.byteOffset + MAILBOX.y(H), MAILBOX.maxPicks * H);
    const wait = (seq: number): void => {
      const t0 = Date.now();
      while (!lane.answered(seq)) if (Date.now() - t0 > 10_000) throw new Error(`request ${seq} not answered in 10 s`);
    };
    for (const [layer, k, cold, split] of [[1, 2, [0, 2, 2, 1], -1], [0, 4, [1, 1, 1, 1, 1, 2, -1, 0], -1], [1, 1, [2, 2, 2], -1], [1, 2, [0, 2, 2, 1], 2], [0, 1, [1], 1]] as const) {
      const rowsIn = cold.length / k;
      const xs = Array.from({ length: rowsIn }, (_, r) => experts[(r + layer) % experts.length]!.x);
      const x = new Float32Array(rowsIn * H);
      xs.forEach((xr, r) => x.set(xr, r * H));
      y.fill(NaN);
      const units = 64, features = 32;
      const seq = lane.post(layer, cold.map((c) => (c < 0 ? -1 : hotRows + c)), { k, x, ...(split >= 0 ? { split: { slot: hotRows + split, units, features } } : {}) });
      const want = cold.map((c, p) => (c < 0 ? null : (() => { const e = experts[layer * coldRows + c]!; return l.expert(e.row, e.at, H, I, xs[Math.floor(p / k)]!, simd); })()));
      if (split >= 0) {
        const t0 = Date.now();
        while (!lane.hostUnitsIn(seq)) if (Date.now() - t0 > 10_000) throw new Error(`request ${seq}: the host's units not in in 10 s`);
        const act = lane.units();
        cold.forEach((c, p) => {
          if (c !== split) return;
          assertSameBits(act.slice(p * I, p * I + units), want[p]!.h.slice(0, units), `simd ${simd}: the host's units of pick ${p}`);
          act.set(want[p]!.h.subarray(units), p * I + units);
        });
        lane.gpuUnitsIn(seq);
      }
      wait(seq);
      cold.forEach((c, p) => {
        if (c < 0) return;
        const n = c === split ? features : H;
        assertSameBits(y.slice(p * H, p * H + n), want[p]!.y.slice(0, n), `simd ${simd}, layer ${layer}, k ${k}, pick ${p}${c === split ? ' (split)' : ''}`);
      });
    }
    assert.deepEqual(lane.faults(), { refused: 0, gpuTimeouts: 0 });
    lane.dispose();
  }
  assert.ok(kept.length > 0);
});
