// The host expert lane (host-lane/host_experts.c, built here with the system's C compiler and build-kernels' flags)
// against its spec (lane-spec.ts), bit for bit, on both of its paths (the spec's own tests:
// host-expert-spec.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { e4m3Value, exactSilu, expertSpec, gpuDot, gpuDotFp8 } from './lane-spec.ts';
import { HostExpertLane, MAILBOX } from './lane.ts';
import type { LaneGrid, LaneRow } from './lane-row.ts';
import { fp8Grid, type Fp8Grid } from '../weights/fp8-grid.ts';
import { bitsOf, fromBits, rng, int, sign, f32With } from './float-bits-test-helpers.ts';
import { checkExpert, laneBanks, lib, libNoVbmi, noCompiler, randomInput, type Expert } from './test-helpers.ts';

/** bf16 bits: sign, an exponent near 127 + scale, 7 random bits; some zeros (both signs) and subnormals. */
function bf16Value(r: () => number, scale: number): number {
  const s = r() < 0.5 ? 0x8000 : 0, u = r();
  if (u < 0.03) return s;
  if (u < 0.04) return s | int(r, 1, 0x7f);
  return s | ((127 + scale + int(r, -6, 1)) << 7) | int(r, 0, 0x7f);
}

/** A random expert, its matrices at odd-sized gaps in the row; rows of each matrix at scales 2^-10 .. 2^4. */
function randomExpert(seed: number, H: number, I: number): Expert {
  const r = rng(seed);
  const at = { gate: 64, up: 64 + 2 * I * H + 32, down: 64 + 4 * I * H + 96 };
  const row = new Uint8Array(at.down + 2 * H * I + 16);
  const fill = (off: number, rows: number, cols: number) => {
    const w = new Uint16Array(row.buffer, off, rows * cols);
    for (let i = 0; i < rows; i++) {
      const scale = int(r, -10, 4);
      for (let k = 0; k < cols; k++) w[i * cols + k] = bf16Value(r, scale);
    }
  };
  fill(at.gate, I, H);
  fill(at.up, I, H);
  fill(at.down, H, I);
  return { row, at, H, I, x: randomInput(r, H) };
}

function gateSums(e: Expert): number[] {
  const gate = new Uint16Array(e.row.slice(e.at.gate, e.at.gate + 2 * e.I * e.H).buffer);
  return Array.from({ length: e.I }, (_, j) => gpuDot(gate, j * e.H, e.x, e.H));
}

for (const [H, I, seeds] of [[256, 256, [11, 12, 13]], [512, 768, [21, 22]], [264, 72, [31, 32, 33]]] as const) {
  test(`random experts, H ${H}, I ${I}: the C library's bits equal the spec's`, { skip: noCompiler }, async (t) => {
    let below = 0, above = 0, between = 0, simdRuns = 0;
    for (const seed of seeds) {
      const e = randomExpert(seed, H, I);
      for (const g of gateSums(e)) g < -87 ? below++ : g > 88 ? above++ : between++;
      if ((await checkExpert(e, `H ${H} I ${I} seed ${seed}`)).simd) simdRuns++;
    }
    assert.ok(below > 0 && above > 0 && between > 0, `silu sees both tails: ${below} gate sums below -87, ${above} above 88, ${between} between`);
    const L = await lib();
    if (H % 256 === 0 && I % 256 === 0 && !L.simdAvailable()) t.diagnostic('no AVX-512 here: the vector path was not compared');
    if (H % 256 !== 0 || I % 256 !== 0) {
      const e = randomExpert(seeds[0], H, I);
      assert.throws(() => L.expert(e.row, e.at, H, I, e.x, true), /he_expert returned -1/, 'the vector path refuses a shape not a multiple of 256');
    } else assert.equal(simdRuns, L.simdAvailable() ? seeds.length : 0);
  });
}

// ---- Block FP8 ----

/** A matrix's grid placed at byte `at` (for a LaneRow), its scale rows `first` rows into the grid. */
const laneGrid = (g: Fp8Grid, at: number, first = 0): LaneGrid => ({ at: at + 4 * first * g.sLd, rows: g.sRows, cols: g.sCols, ld: g.sLd });

/** A block-FP8 row layout for H, I and `block` (fp8-grid.ts's grids), the pieces at odd gaps (grids 4-byte aligned). */
function fp8Layout(H: number, I: number, block: readonly [number, number]): { at: LaneRow; bytes: number; gu: Fp8Grid; dn: Fp8Grid } {
  const gu = fp8Grid([I, I], H, block), dn = fp8Grid([H], I, block);
  const gate = 64, up = gate + I * H + 32, down = up + I * H + 96;
  const guAt = down + H * I + 4, dnAt = guAt + gu.bytes + 12;
  const at: LaneRow = { gate, up, down, scales: { gate: laneGrid(gu, guAt), up: laneGrid(gu, guAt, I / gu.sRows), down: laneGrid(dn, dnAt) } };
  return { at, bytes: dnAt + dn.bytes + 16, gu, dn };
}

/**
 * A random block-FP8 expert: e4m3 bytes of every kind but NaN (zeros of both signs, subnormals, negatives, up to
 * +-448); scales of either sign near a scale row's own size (2^-25 .. 2^1), with zeros and subnormals among them.
 */
function randomFp8Expert(seed: number, H: number, I: number, block: readonly [number, number] = [128, 128]): Expert {
  const r = rng(seed);
  const { at, bytes, gu, dn } = fp8Layout(H, I, block);
  const row = new Uint8Array(bytes);
  for (const [off, n] of [[at.gate, I * H], [at.up, I * H], [at.down, H * I]] as const) {
    for (let i = 0; i < n; i++) {
      let b = int(r, 0, 255);
      while ((b & 0x7f) === 0x7f) b = int(r, 0, 255);
      row[off + i] = b;
    }
  }
  for (const [g, grid] of [[at.scales!.gate, gu], [at.scales!.down, dn]] as const) {
    const s = new Float32Array(row.buffer, g.at, grid.rows * grid.sLd);
    let size = 0;
    for (let i = 0; i < s.length; i++) {
      if (i % grid.sLd === 0) size = int(r, -22, 0);
      const u = r();
      s[i] = u < 0.02 ? 0 : u < 0.03 ? -0 : u < 0.06 ? sign(r) * fromBits(int(r, 1, 0x7fffff)) : sign(r) * f32With(r, size + int(r, -3, 1));
    }
  }
  return { row, at, H, I, x: randomInput(r, H) };
}

function fp8GateSums(e: Expert): number[] {
  const g = e.at.scales!.gate, w = e.row.slice(e.at.gate, e.at.gate + e.I * e.H);
  const scales = new Float32Array(e.row.slice(g.at, g.at + 4 * Math.ceil(e.I / g.rows) * g.ld).buffer);
  return Array.from({ length: e.I }, (_, j) => gpuDotFp8(w, j * e.H, scales, Math.floor(j / g.rows) * g.ld, g.cols, e.x, e.H));
}

test('e4m3 bytes as fp8x8_to_float widens them: both zeros, subnormals m x 2^-9, normals to 448, NaN at S.1111.111', () => {
  const want: [number, number][] = [[0x00, 0], [0x80, -0], [0x01, 2 ** -9], [0x07, 7 * 2 ** -9], [0x87, -7 * 2 ** -9], [0x08, 2 ** -6], [0x0f, 1.875 * 2 ** -6],
    [0x38, 1], [0x39, 1.125], [0xb8, -1], [0x7e, 448], [0xfe, -448], [0x77, 240], [0x78, 256]];
  for (const [b, v] of want) assert.ok(Object.is(e4m3Value(b), v), `0x${b.toString(16)}: ${e4m3Value(b)}, want ${v}`);
  assert.ok(Number.isNaN(e4m3Value(0x7f)) && Number.isNaN(e4m3Value(0xff)));
  for (let b = 0; b < 256; b++) if ((b & 0x7f) !== 0x7f) assert.equal(Math.fround(e4m3Value(b)), e4m3Value(b), 'every value is a float32');
});

test('FP8: each of the 256 bytes through the C library, scalar and vector (both widenings): unit j = silu(448) x value(j) = 448 x value(j), NaN bytes NaN units', { skip: noCompiler }, async () => {
  const L = await lib(), N = await libNoVbmi();
  const H = 256, I = 256;
  const { at, bytes, gu, dn } = fp8Layout(H, I, [128, 128]);
  const row = new Uint8Array(bytes);
  // Gate row j: 448 at one value (its sum 448: silu 448 exactly, e^-448 being 0); up row j: byte j at another, in a
  // lane and a place of its load that move with j. x all ones, scales one.
  for (let j = 0; j < I; j++) {
    row[at.gate + j * H + ((5 * j) % H)] = 0x7e;
    row[at.up + j * H + ((17 * j + 3) % H)] = j;
  }
  new Float32Array(row.buffer, at.scales!.gate.at, gu.rows * gu.sLd).fill(1);
  new Float32Array(row.buffer, at.scales!.down.at, dn.rows * dn.sLd).fill(1);
  const e: Expert = { row, at, H, I, x: new Float32Array(H).fill(1) };
  const want = expertSpec(row, at, H, I, e.x);
  for (const [simd, V] of L.simdAvailable() ? [[false, L], [true, L], [true, N]] as const : [[false, L]] as const) {
    const { h } = V.expert(row, at, H, I, e.x, simd);
    for (let j = 0; j < I; j++) {
      const v = 448 * (e4m3Value(j) + 0); // a chunk's chain starts from +0: byte 0x80 (-0) sums to +0
      const path = `${simd ? 'simd' : 'scalar'}${V === N ? ' (integer widening)' : ''}`;
      assert.ok(Number.isNaN(v) ? Number.isNaN(h[j]!) : Object.is(h[j], v), `${path}: byte 0x${j.toString(16)} gave ${h[j]}, want ${v}`);
      assert.ok(Object.is(h[j], want.h[j]) || (Number.isNaN(h[j]!) && Number.isNaN(want.h[j]!)), `${path}: unit ${j} as the spec`);
    }
  }
});

// Shapes the GPU takes (H and I multiples of 32): whole and half 512-value rounds of the warp's loads (vector path),
// Qwen3-30B-A3B's (H 2048: 4 chunks a lane, so the scale's fused add into a lane's sum is seen), sizes that are no
// multiple of the block (I 96 and 160: gate | up scale rows of 32 weight rows, a down row one or two blocks, the last
// partial; H 288), and scale blocks one a chunk pair (32), 96 wide (lanes of a 256-value block straddling them), 512
// wide (one scale a row of 256).
for (const [H, I, block, seeds] of [[512, 256, [128, 128], [41, 42]], [512, 768, [128, 128], [43]], [2048, 768, [128, 128], [40]], [256, 96, [128, 128], [44, 45]],
  [288, 160, [128, 128], [46]], [1024, 256, [64, 32], [47]], [1024, 512, [128, 96], [48]], [512, 256, [32, 512], [49]]] as const) {
  test(`random block-FP8 experts, H ${H}, I ${I}, [${block.join(', ')}] blocks: the C library's bits equal the spec's`, { skip: noCompiler }, async (t) => {
    let below = 0, above = 0, between = 0, simdRuns = 0;
    for (const seed of seeds) {
      const e = randomFp8Expert(seed, H, I, block);
      for (const g of fp8GateSums(e)) g < -87 ? below++ : g > 88 ? above++ : between++;
      if ((await checkExpert(e, `FP8 H ${H} I ${I} [${block.join(', ')}] seed ${seed}`)).simd) simdRuns++;
    }
    assert.ok(below > 0 && above > 0 && between > 0, `silu sees both tails: ${below} gate sums below -87, ${above} above 88, ${between} between`);
    const L = await lib();
    if (H % 256 === 0 && I % 256 === 0 && !L.simdAvailable()) t.diagnostic('no AVX-512 here: the vector path was not compared');
    if (H % 256 !== 0 || I % 256 !== 0) {
      const e = randomFp8Expert(seeds[0], H, I, block);
      assert.throws(() => L.expert(e.row, e.at, H, I, e.x, true), /he_expert returned -1/, 'the vector path refuses a shape not a multiple of 256');
    } else assert.equal(simdRuns, L.simdAvailable() ? seeds.length : 0);
  });
}

test('FP8: he_expert refuses a layout it cannot compute (-2): sizes not multiples of 16, scale blocks not, a grid row too short, a grid not 4-byte aligned', { skip: noCompiler }, async () => {
  const L = await lib();
  const e = randomFp8Expert(50, 256, 96);
  const s = e.at.scales!;
  const bad: [LaneRow, number, number][] = [
    [e.at, 256, 88],
    [{ ...e.at, scales: { ...s, down: { ...s.down, cols: 40 } } }, 256, 96],
    [{ ...e.at, scales: { ...s, gate: { ...s.gate, ld: 1 } } }, 256, 96],
    [{ ...e.at, scales: { ...s, up: { ...s.up, at: s.up.at + 2 } } }, 256, 96],
    [{ ...e.at, scales: { ...s, down: { ...s.down, rows: 0 } } }, 256, 96],
  ];
  for (const [at, H, I] of bad) assert.throws(() => L.expert(e.row, at, H, I, e.x.subarray(0, H), false), /he_expert returned -2/);
  assert.doesNotThrow(() => L.expert(e.row, e.at, 256, 96, e.x, false));
});

test('exp and silu at their edges: gate sums fed one-hot, the C library against the spec and the limits', { skip: noCompiler }, async () => {
  const loaded = await lib();
  const H = 256, I = 256, one = 0x3f80;
  const next = (v: number, d: number) => fromBits(bitsOf(v) + d);
  const edges = [0, -0, 2 ** -149, -(2 ** -149), 1e-30, -1e-30, 1, -1, 10, -10, 1e4, -1e4];
  for (const v of [86.9, 87, 87.3365, 87.5, 88, 88.5, 88.7228, 89, 100, 103.9]) {
    const f = Math.fround(v);
    edges.push(f, -f, next(f, 1), -next(f, 1), next(f, -1), -next(f, -1));
  }
  // exp's n = rintf(-g log2 e) at its ties (a float32 product k + 1/2): rounded to even, both parities of k.
  const log2e = Math.fround(1.44269504088896341);
  const ties: number[] = [];
  for (let k2 = -251; k2 <= 253 && ties.length < 120; k2 += 2) {
    const b0 = bitsOf(k2 / 2 / log2e);
    for (let d = -40; d <= 40; d++) {
      const v = fromBits(b0 + d);
      if (Math.fround(v * log2e) === k2 / 2 && v >= -87 && v <= 88) { ties.push(-v); break; }
    }
  }
  assert.ok(ties.length >= 100, `${ties.length} ties of rintf found`);
  edges.push(...ties);
  const r = rng(7);
  while (edges.length < H - 1) edges.push(Math.fround(-95 + 190 * r()));
  const x = Float32Array.from([...edges, 1]);
  const at = { gate: 0, up: 2 * I * H, down: 4 * I * H };
  const row = new Uint8Array(6 * I * H);
  const gate = new Uint16Array(row.buffer, at.gate, I * H), up = new Uint16Array(row.buffer, at.up, I * H), down = new Uint16Array(row.buffer, at.down, H * I);
  for (let j = 0; j < I; j++) {
    gate[j * H + j] = one; // g_j = x[j]
    up[j * H + H - 1] = one; // u_j = 1
  }
  for (let i = 0; i < down.length; i++) down[i] = bf16Value(r, -4);
  const e = { row, at, H, I, x };
  await checkExpert(e, 'edges');
  const { h } = loaded.expert(row, at, H, I, x, false);
  for (let j = 0; j < H - 1; j++) {
    const g = x[j]!, gz = g + 0;
    assert.equal(bitsOf(h[j]!), bitsOf(exactSilu(gz)), `h[${j}] is silu(${g})`);
    if (g < -88) assert.ok(Object.is(h[j], -0), `g ${g} < -88: e^-g is infinite, silu -0`);
    if (g > 87) assert.equal(h[j], g, `g ${g} > 87: e^-g is 0, silu g`);
    if (g === 0) assert.ok(Object.is(h[j], 0), 'a zero sum (either sign) plus zero is +0, and silu(+0) = +0');
  }
});

// ---- The threaded lane: requests through the mailbox (Buffers standing in for the pinned mailbox and cold banks) ----

// bf16 rows, and block-FP8 rows (their vector path's blocks of 256 values: gate | up two a row, down one).
const laneCases = [
  { what: '', H: 256, I: 256, make: (seed: number) => randomExpert(seed, 256, 256) },
  { what: ' (block-FP8 experts)', H: 512, I: 256, make: (seed: number) => randomFp8Expert(seed, 512, 256) },
];
for (const c of laneCases) test(`the lane's threads answer mailbox requests with each pick's expert (the bits he_expert gives), split an expert with the GPU's side, refuse a bad slot or split, and stop (requests pending too)${c.what}`, { skip: noCompiler, timeout: 120_000 }, async () => {
  const l = await lib();
  const { H, I } = c, layers = 2, hotRows = 5, coldRows = 3;
  const experts = Array.from({ length: layers * coldRows }, (_, i) => c.make(900 + i));
  const { rowBytes, driver, bankOf, kept } = laneBanks(l, experts, layers, hotRows, coldRows);
  for (const simd of [false, true]) {
    if (simd && !l.simdAvailable()) continue;
    const at = experts[0]!.at;
    // A layout that runs past the row's end (a matrix, or a scale grid) is refused before a thread starts.
    const past: LaneRow[] = [{ ...at, down: rowBytes - 16 }];
    if (at.scales) past.push({ ...at, scales: { ...at.scales, down: { ...at.scales.down, at: rowBytes - 4 } } });
    for (const a of past) assert.throws(() => new HostExpertLane(l, driver, bankOf(a), { threads: 1, simd, pin: false }), /he_start refused/);
    const lane = new HostExpertLane(l, driver, bankOf(at), { threads: Math.min(3, availableParallelism()), simd, pin: false });
    const mb = (lane as unknown as { mailbox: { host: Uint8Array } }).mailbox.host;
    const y = new Float32Array(mb.buffer, mb.byteOffset + MAILBOX.y(H), MAILBOX.maxPicks * H);
    const wait = (seq: number): void => {
      const t0 = Date.now();
      while (!lane.answered(seq)) if (Date.now() - t0 > 10_000) throw new Error(`request ${seq} not answered in 10 s`);
    };
    for (const [layer, cold] of [[1, [2, 0]], [0, [1]], [1, [0, 1, 2, 1]]] as const) {
      const x = experts[0]!.x;
      const seq = lane.post(layer, cold.map((c) => hotRows + c), { x });
      wait(seq);
      cold.forEach((c, j) => {
        const e = experts[layer * coldRows + c]!;
        const want = l.expert(e.row, e.at, H, I, x, simd).y;
        assert.deepEqual(new Uint32Array(y.slice(j * H, (j + 1) * H).buffer), new Uint32Array(want.buffer), `simd ${simd}, layer ${layer}, pick ${j} (cold row ${c})`);
      });
    }
    // Several rows (k picks a row), some picks not the host's (-1), an expert picked by several rows (its weights read
    // once for all of them: 7 rows of one expert take the vector path's 4 + 3): each host pick's output is its
    // expert on its own row's input.
    for (const [layer, k, cold] of [[0, 3, [2, -1, 0, 0, 1, -1]], [1, 1, [1, 1, 1, 1, 1, 1, 1, 2]], [1, 2, [-1, -1, 2, -1]]] as const) {
      const rowsIn = cold.length / k;
      const xs = Array.from({ length: rowsIn }, (_, r) => experts[(r + layer) % experts.length]!.x);
      const x = new Float32Array(rowsIn * H);
      xs.forEach((xr, r) => x.set(xr, r * H));
      y.fill(NaN);
      wait(lane.post(layer, cold.map((c) => (c < 0 ? -1 : hotRows + c)), { k, x }));
      cold.forEach((c, p) => {
        if (c < 0) return;
        const e = experts[layer * coldRows + c]!;
        const want = l.expert(e.row, e.at, H, I, xs[Math.floor(p / k)]!, simd).y;
        assert.deepEqual(new Uint32Array(y.slice(p * H, (p + 1) * H).buffer), new Uint32Array(want.buffer), `simd ${simd}, layer ${layer}, k ${k}, pick ${p} (cold row ${c})`);
      });
    }
    // A split expert (playing the GPU's side as op_host_exchange does): the host's units of it come first, in plain
    // order; with the GPU's in, the host's features of its down product have he_expert's bits, the rest are not
    // written; whole experts beside it as before. Its picks may be any of the rows'.
    for (const [layer, k, cold, split, units, features] of [[1, 2, [0, 2, 2, 1], 2, 64, 128], [0, 1, [1], 1, 192, 8], [1, 1, [2, 0], 2, 8, 248]] as const) {
      const rowsIn = cold.length / k;
      const xs = Array.from({ length: rowsIn }, (_, r) => experts[(r + 2 * layer + 1) % experts.length]!.x);
      const x = new Float32Array(rowsIn * H);
      xs.forEach((xr, r) => x.set(xr, r * H));
      y.fill(NaN);
      const act = lane.units();
      act.fill(NaN);
      const seq = lane.post(layer, cold.map((c) => hotRows + c), { k, x, split: { slot: hotRows + split, units, features } });
      const want = cold.map((c, p) => { const e = experts[layer * coldRows + c]!; return l.expert(e.row, e.at, H, I, xs[Math.floor(p / k)]!, simd); });
      const t0 = Date.now();
      while (!lane.hostUnitsIn(seq)) if (Date.now() - t0 > 10_000) throw new Error(`request ${seq}: the host's units not in in 10 s`);
      assert.equal(lane.answered(seq), false, 'no answer before the GPU\'s units are in');
      const splitPicks = cold.flatMap((c, p) => (c === split ? [p] : []));
      for (const p of splitPicks) {
        const row = act.subarray(p * I, (p + 1) * I);
        assert.deepEqual(new Uint32Array(row.slice(0, units).buffer), new Uint32Array(want[p]!.h.slice(0, units).buffer), `simd ${simd}: the host's units of pick ${p}`);
        row.set(want[p]!.h.subarray(units), units);
      }
      lane.gpuUnitsIn(seq);
      wait(seq);
      cold.forEach((c, p) => {
        const n = c === split ? features : H;
        const got = y.slice(p * H, (p + 1) * H);
        assert.deepEqual(new Uint32Array(got.slice(0, n).buffer), new Uint32Array(want[p]!.y.slice(0, n).buffer), `simd ${simd}, layer ${layer}, k ${k}, pick ${p}${c === split ? ' (split)' : ''}`);
        assert.ok(got.slice(n).every(Number.isNaN), `pick ${p}: the GPU's features left alone`);
      });
    }
    assert.deepEqual(lane.faults(), { refused: 0, gpuTimeouts: 0 });
    wait(lane.post(0, [hotRows - 1])); // a hot slot: not the lane's
    wait(lane.post(0, [hotRows + coldRows])); // past the cold bank
    wait(lane.post(0, [-1, -1])); // nothing for the host
    wait(lane.post(0, [hotRows, hotRows], { k: 3 })); // more picks a row than picks
    wait(lane.post(0, [hotRows], { split: { slot: hotRows + 1, units: 8, features: 8 } })); // a split expert none of the picks'
    wait(lane.post(0, [hotRows], { split: { slot: hotRows, units: I, features: 8 } })); // all of its units
    wait(lane.post(0, [hotRows], { split: { slot: hotRows, units: 8, features: 0 } })); // none of its features
    assert.deepEqual(lane.faults(), { refused: 7, gpuTimeouts: 0 });
    assert.throws(() => lane.check(), /host experts: 7 request\(s\) refused/);
    assert.equal(lane.stats().requests, 16);
    assert.throws(() => lane.post(0, new Array<number>(MAILBOX.maxPicks + 1).fill(hotRows)), /post\(\) takes at most 32 picks, got 33/);
    // Many requests back to back, then one left pending when the lane stops (a split one whose GPU units never come,
    // or a plain one): every thread leaves at the same point.
    for (let r = 0; r < 200; r++) wait(lane.post(r % layers, [hotRows + (r % coldRows)]));
    if (simd) lane.post(1, [hotRows, hotRows + 1], { split: { slot: hotRows + 1, units: 8, features: 8 } });
    else lane.post(1, [hotRows, hotRows + 1, hotRows + 2]);
    lane.dispose();
    assert.throws(() => lane.post(0, [hotRows]), /the lane was used after dispose\(\)/);
  }
  assert.ok(kept.length > 0);
});
