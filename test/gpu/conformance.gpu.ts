// Single-op conformance: each kernel on fresh random inputs against its CPU twin (src/backend/cpu/ops.ts),
// outputs poisoned first. fp32 paths are held to ~1e-6 normalized error; bf16 weights are exact on both
// sides (the inputs are drawn as bf16), so the same bound applies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { embedding, headNorm, linear, rmsnorm, rope, ropeTables, softmax, topk } from '../../src/backend/cpu/ops.ts';
import { topkSoftmax } from '../../src/backend/cpu/routers.ts';
import { getGpu, normErr, poisoned, randomBf16, randomF32, rng, upload } from './harness.ts';

const TIGHT = 2e-6;

test('op_embed copies bf16 rows exactly', async () => {
  const g = await getGpu();
  const r = rng('embed');
  const V = 300, H = 128, rows = 7;
  const table = randomBf16(V * H, r);
  const tokens = Int32Array.from({ length: rows }, () => Math.floor(((r() + 1) / 2) * V) % V);
  const out = poisoned(g, 4 * rows * H, 'out');
  g.d.launch(g.fns.get('op_embed')!, 'op_embed', [rows, 1, 1], 128, 0, g.stream,
    [{ u64: upload(g, table.bytes, 't') }, { u64: upload(g, tokens, 'tok') }, { u64: out }, { i32: rows }, { i32: H }]);
  g.d.streamSync(g.stream, 'op_embed');
  const got = new Float32Array(rows * H);
  g.d.dtoh(got, out);
  const ref = new Float32Array(rows * H);
  for (let i = 0; i < rows; i++) embedding(ref, i * H, table.f32, tokens[i]!, H);
  assert.deepEqual(got, ref);
});

for (const [O, K, rows] of [[256, 128, 5], [128, 48, 3], [8192, 128, 2], [96, 128, 16]] as const) {
  test(`op_gemm_bf16 ${rows}x${K} -> ${O} matches linear()`, async () => {
    const g = await getGpu();
    const r = rng(`gemm ${O}x${K}`);
    const W = randomBf16(O * K, r, 0.1);
    const X = randomF32(rows * K, r);
    const Y = poisoned(g, 4 * rows * O, 'Y');
    const warps = 8;
    g.d.launch(g.fns.get('op_gemm_bf16')!, 'op_gemm_bf16', [Math.ceil(O / warps), rows, 1], 32 * warps, 0, g.stream,
      [{ u64: upload(g, W.bytes, 'W') }, { u64: upload(g, X, 'X') }, { u64: Y }, { i32: rows }, { i32: O }, { i32: K }]);
    g.d.streamSync(g.stream, 'op_gemm_bf16');
    const got = new Float32Array(rows * O);
    g.d.dtoh(got, Y);
    const ref = new Float32Array(rows * O);
    linear(ref, W.f32, 0, X, rows, O, K);
    const e = normErr(got, ref);
    console.log(`# gemm ${rows}x${K}->${O}: normalized error ${e.toExponential(2)}`);
    assert.ok(e < TIGHT, `error ${e}`);
  });
}

// warp_topk at every width: registers up to 512 experts, the rounds with a taken mask beyond (513-1024). Ties (values
// on a 1/4 grid), NaN and -inf among them; the CPU's topkSoftmax is the spec where a row has k finite values. Where
// it has fewer, the kernel's own rule (NaN as -inf, ties to the lower id) must still give k distinct experts in range:
// the rounds it replaced took a taken expert again there, and wrote v[INT_MAX] on a row of NaN.
for (const E of [384, 640, 1024]) {
  test(`op_route top-k then softmax over ${E} experts: ties, NaN and -inf as the CPU's topkSoftmax; k distinct picks on a row of fewer than k finite values`, async () => {
    const g = await getGpu();
    const r = rng(`route topk ${E}`);
    const rows = 40, K = 8;
    const logits = Float32Array.from({ length: rows * E }, () => Math.round(r() * 16) / 4);
    for (let i = 0; i < logits.length; i++) {
      const u = r();
      if (u > 0.9) logits[i] = Number.NaN;
      else if (u < -0.9) logits[i] = -Infinity;
    }
    const sparse = rows - 2, nan = rows - 1; // three finite values, the rest -inf or NaN; all NaN
    for (let e = 0; e < E; e++) logits[sparse * E + e] = e % 2 ? -Infinity : Number.NaN;
    logits[sparse * E + E - 1] = 1; logits[sparse * E + 7] = 2; logits[sparse * E + 600 % E] = 1;
    logits.fill(Number.NaN, nan * E, (nan + 1) * E);
    const slots = Int32Array.from({ length: E }, (_, e) => E - 1 - e);
    const counter = g.d.alloc(4 * E, 'counter');
    g.d.memsetD8(counter, 0, 4 * E);
    const ids = poisoned(g, 4 * rows * K, 'ids'), ws = poisoned(g, 4 * rows * K, 'ws'), sl = poisoned(g, 4 * rows * K, 'slots out');
    g.d.launch(g.fns.get('op_route')!, 'op_route', [rows, 1, 1], 32, 0, g.stream,
      [{ u64: upload(g, logits, 'logits') }, { i32: E }, { i32: K }, { i32: 2 }, { u64: upload(g, slots, 'slots') }, { u64: ids }, { u64: ws }, { u64: sl },
        { u64: counter }, { u64: upload(g, Int32Array.of(1), 'flag') }]);
    g.d.streamSync(g.stream, `op_route E=${E}`);
    const gi = new Int32Array(rows * K), gw = new Float32Array(rows * K), gs = new Int32Array(rows * K);
    g.d.dtoh(gi, ids); g.d.dtoh(gw, ws); g.d.dtoh(gs, sl);
    const ri = new Int32Array(rows * K), rw = new Float32Array(rows * K);
    for (let t = 0; t < sparse; t++) topkSoftmax(ri, t * K, rw, t * K, logits, t * E, E, K);
    const n = sparse * K;
    assert.deepEqual(gi.subarray(0, n), ri.subarray(0, n), 'routed ids (rows of >= k finite values)');
    assert.ok(normErr(gw.subarray(0, n), rw.subarray(0, n)) < 1e-6, `weights error ${normErr(gw.subarray(0, n), rw.subarray(0, n))}`);
    // The rest: the finite ones first (largest first, ties to the lower id: 600 % E < E - 1 here), then the lowest ids of the others.
    const rest = (finite: number[]) => [...finite, ...Array.from({ length: E }, (_, e) => e).filter((e) => !finite.includes(e))].slice(0, K);
    assert.deepEqual([...gi.subarray(sparse * K, (sparse + 1) * K)], rest([7, 600 % E, E - 1]), 'three finite values, then -inf / NaN by id');
    assert.deepEqual([...gi.subarray(nan * K)], rest([]), 'a row of NaN: the first k ids');
    assert.deepEqual(gs, Int32Array.from(gi, (e) => slots[e]!), 'slots = slot table of the ids');
  });
}

test('op_rmsnorm matches rmsnorm()', async () => {
  const g = await getGpu();
  const r = rng('rmsnorm');
  const rows = 9, n = 128, eps = 1e-6;
  const w = randomBf16(n, r);
  const X = randomF32(rows * n, r, 3);
  const Y = poisoned(g, 4 * rows * n, 'Y');
  g.d.launch(g.fns.get('op_rmsnorm')!, 'op_rmsnorm', [rows, 1, 1], 128, 4 * n, g.stream,
    [{ u64: upload(g, X, 'X') }, { u64: upload(g, w.bytes, 'w') }, { u64: Y }, { i32: n }, { f32: eps }]);
  g.d.streamSync(g.stream, 'op_rmsnorm');
  const got = new Float32Array(rows * n);
  g.d.dtoh(got, Y);
  const ref = new Float32Array(rows * n);
  for (let i = 0; i < rows; i++) rmsnorm(ref, i * n, X, i * n, w.f32, n, eps);
  const e = normErr(got, ref);
  console.log(`# rmsnorm: normalized error ${e.toExponential(2)}`);
  assert.ok(e < TIGHT, `error ${e}`);
});

test('op_headnorm_rope matches headNorm() + rope()', async () => {
  const g = await getGpu();
  const r = rng('headnorm_rope');
  const rows = 6, heads = 3, d = 64, eps = 1e-6, theta = 10000, maxPos = 2048;
  const w = randomBf16(d, r);
  const X = randomF32(rows * heads * d, r, 2);
  const pos = Int32Array.from({ length: rows }, (_, i) => (i === 0 ? 0 : Math.floor(((r() + 1) / 2) * (maxPos - 1))));
  const Xd = upload(g, X, 'X');
  g.d.launch(g.fns.get('op_headnorm_rope')!, 'op_headnorm_rope', [rows, 1, 1], 32 * heads, 0, g.stream,
    [{ u64: Xd }, { u64: upload(g, w.bytes, 'w') }, { u64: upload(g, pos, 'pos') }, { i32: heads }, { i32: d }, { f32: eps }, { f32: theta }]);
  g.d.streamSync(g.stream, 'op_headnorm_rope');
  const got = new Float32Array(X.length);
  g.d.dtoh(got, Xd);
  const ref = X.slice();
  const { cos, sin } = ropeTables(d, theta, maxPos);
  for (let i = 0; i < rows; i++) {
    headNorm(ref, i * heads * d, heads, d, w.f32, eps);
    for (let h = 0; h < heads; h++) rope(ref, (i * heads + h) * d, d, cos, sin, pos[i]!);
  }
  const e = normErr(got, ref);
  console.log(`# headnorm+rope (positions up to ${Math.max(...pos)}): normalized error ${e.toExponential(2)}`);
  assert.ok(e < 1e-5, `error ${e}`); // sin/cos of large float32 angles: a few ulps apart from Math.sin
});

test('op_route: softmax, top-k, renormalize, split by the slot table, count only when the flag is on', async () => {
  const g = await getGpu();
  const r = rng('route');
  const rows = 64, E = 64, K = 6;
  const logits = randomF32(rows * E, r, 4);
  const slots = Int32Array.from({ length: E }, (_, e) => e);
  for (let i = E - 1; i > 0; i--) { const j = Math.floor(((r() + 1) / 2) * (i + 1)) % (i + 1); [slots[i], slots[j]] = [slots[j]!, slots[i]!]; }
  const counter = g.d.alloc(4 * E, 'counter');
  g.d.memsetD8(counter, 0, 4 * E);
  const ids = poisoned(g, 4 * rows * K, 'ids');
  const ws = poisoned(g, 4 * rows * K, 'ws');
  const sl = poisoned(g, 4 * rows * K, 'slots out');
  const slotsDev = upload(g, slots, 'slots');
  for (const flag of [1, 0]) {
    g.d.launch(g.fns.get('op_route')!, 'op_route', [rows, 1, 1], 32, 0, g.stream,
      [{ u64: upload(g, logits, 'logits') }, { i32: E }, { i32: K }, { i32: 1 }, { u64: slotsDev }, { u64: ids }, { u64: ws }, { u64: sl },
        { u64: counter }, { u64: upload(g, Int32Array.of(flag), 'flag') }]);
  }
  g.d.streamSync(g.stream, 'op_route');
  const gi = new Int32Array(rows * K), gw = new Float32Array(rows * K), gs = new Int32Array(rows * K), gc = new Uint32Array(E);
  g.d.dtoh(gi, ids); g.d.dtoh(gw, ws); g.d.dtoh(gs, sl); g.d.dtoh(gc, counter);
  const probs = new Float32Array(E), ri = new Int32Array(rows * K), rw = new Float32Array(rows * K), hist = new Uint32Array(E);
  for (let t = 0; t < rows; t++) {
    softmax(probs, 0, logits, t * E, E);
    topk(ri, t * K, rw, t * K, probs, 0, E, K, true);
  }
  for (const e of ri) hist[e]!++;
  assert.deepEqual(gi, ri, 'routed ids');
  assert.ok(normErr(gw, rw) < 1e-6, `weights error ${normErr(gw, rw)}`);
  assert.deepEqual(gs, Int32Array.from(ri, (e) => slots[e]!), 'slots = slot table of the ids');
  assert.deepEqual(gc, hist, 'counter = histogram of the picks (flag on once, off once)');
});
