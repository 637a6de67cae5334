// Single-op conformance: each kernel on fresh random inputs against its CPU twin (src/backend/cpu/ops.ts),
// outputs poisoned first. fp32 paths are held to ~1e-6 normalized error; bf16 weights are exact on both
// sides (the inputs are drawn as bf16), so the same bound applies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { embedding, headNorm, linear, rmsnorm, rope, ropeTables, softmax, topk } from '../../src/backend/cpu/ops.ts';
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
