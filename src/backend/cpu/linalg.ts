// The CPU reference's linear algebra: dot products, linear layers, RMSNorm, embedding. Each op is a small
// function over typed arrays + offsets, the living spec every GPU kernel is tested against. Storage is
// float32; sums accumulate in float64 (JS numbers) and round once on store, which is at least as exact as
// a float32 accumulator. Every op computes one row the same way whatever the batch, so a token's result
// never depends on what it was batched with.
import type { VocabMatrix } from '../../model/weights.ts';

/** Dot product of a[aOff..aOff+n) and b[bOff..bOff+n): four float64 accumulators in a fixed order. */
export function dot(a: Float32Array, aOff: number, b: Float32Array, bOff: number, n: number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  // Two running indices instead of base + i: fewer integer adds per load (measurably faster on the lm head).
  const end = aOff + n;
  let i = aOff;
  let j = bOff;
  for (; i + 3 < end; i += 4, j += 4) {
    s0 += a[i]! * b[j]!;
    s1 += a[i + 1]! * b[j + 1]!;
    s2 += a[i + 2]! * b[j + 2]!;
    s3 += a[i + 3]! * b[j + 3]!;
  }
  for (; i < end; i++, j++) s0 += a[i]! * b[j]!;
  return s0 + s1 + (s2 + s3);
}

/**
 * Copy embedding row `token` of `table` ([V][H]) to out[outOff..outOff+H); a bf16 table kept as stored widens
 * that one row (exact: a bf16 value is the top half of its float32).
 */
export function embedding(out: Float32Array, outOff: number, table: VocabMatrix, token: number, h: number): void {
  if (table instanceof Float32Array) {
    out.set(table.subarray(token * h, token * h + h), outOff);
    return;
  }
  const bits = new Uint32Array(out.buffer, out.byteOffset + 4 * outOff, h);
  const d = table.data;
  const at = token * h;
  for (let c = 0; c < h; c++) bits[c] = d[at + c]! << 16;
}

/** RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, over n values (in place allowed). */
export function rmsnorm(
  out: Float32Array,
  outOff: number,
  x: Float32Array,
  xOff: number,
  weight: Float32Array,
  n: number,
  eps: number,
): void {
  let ss = 0;
  for (let i = 0; i < n; i++) {
    const v = x[xOff + i]!;
    ss += v * v;
  }
  // torch: hidden * rsqrt(variance + eps) in float32, then weight * that.
  const inv = Math.fround(1 / Math.sqrt(Math.fround(Math.fround(ss / n) + eps)));
  for (let i = 0; i < n; i++) out[outOff + i] = weight[i]! * Math.fround(x[xOff + i]! * inv);
}

/**
 * The residual add and the next RMSNorm of tokens [t0, t1) ([T][n] rows): x += add, then xn = rmsnorm(x) with
 * `weight`, each row as addInPlace then rmsnorm compute it (rows are independent: threads may take any tokens).
 */
export function addNorm(x: Float32Array, add: Float32Array, xn: Float32Array, weight: Float32Array, t0: number, t1: number, n: number, eps: number): void {
  for (let t = t0; t < t1; t++) {
    addInPlace(x, t * n, add, t * n, n);
    rmsnorm(xn, t * n, x, t * n, weight, n, eps);
  }
}

/**
 * y = W x for `rows` inputs: W row-major [outDim][inDim], x [rows][inDim], y [rows][outDim]. Loops over
 * weight rows outside so a weight row is read once per batch, and takes inputs two at a time (`dot2`)
 * so each weight load serves both; every output is summed in exactly `dot`'s order whatever the batch.
 */
export function linear(
  y: Float32Array,
  w: Float32Array,
  wOff: number,
  x: Float32Array,
  rows: number,
  outDim: number,
  inDim: number,
): void {
  linearRows(y, w, wOff, x, rows, outDim, inDim, 0, outDim);
}

/**
 * The output rows [o0, o1) of `linear` (every input, those weight rows): the unit a thread computes when
 * a linear layer is split by output rows. Each output is computed exactly as `linear` computes it.
 */
export function linearRows(
  y: Float32Array,
  w: Float32Array,
  wOff: number,
  x: Float32Array,
  rows: number,
  outDim: number,
  inDim: number,
  o0: number,
  o1: number,
): void {
  for (let o = o0; o < o1; o++) {
    const wRow = wOff + o * inDim;
    let r = 0;
    for (; r + 1 < rows; r += 2) dot2(y, r * outDim + o, (r + 1) * outDim + o, w, wRow, x, r * inDim, (r + 1) * inDim, inDim);
    if (r < rows) y[r * outDim + o] = dot(w, wRow, x, r * inDim, inDim);
  }
}

/**
 * Two dot products sharing the first operand: y[y0] = a.b[b0..), y[y1] = a.b[b1..). Each sum uses the
 * same four accumulators in the same order as `dot`, so results are bit-identical to two `dot` calls.
 */
export function dot2(
  y: Float32Array,
  y0: number,
  y1: number,
  a: Float32Array,
  aOff: number,
  b: Float32Array,
  b0: number,
  b1: number,
  n: number,
): void {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let t0 = 0;
  let t1 = 0;
  let t2 = 0;
  let t3 = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const w0 = a[aOff + i]!;
    const w1 = a[aOff + i + 1]!;
    const w2 = a[aOff + i + 2]!;
    const w3 = a[aOff + i + 3]!;
    s0 += w0 * b[b0 + i]!;
    s1 += w1 * b[b0 + i + 1]!;
    s2 += w2 * b[b0 + i + 2]!;
    s3 += w3 * b[b0 + i + 3]!;
    t0 += w0 * b[b1 + i]!;
    t1 += w1 * b[b1 + i + 1]!;
    t2 += w2 * b[b1 + i + 2]!;
    t3 += w3 * b[b1 + i + 3]!;
  }
  for (; i < n; i++) {
    s0 += a[aOff + i]! * b[b0 + i]!;
    t0 += a[aOff + i]! * b[b1 + i]!;
  }
  y[y0] = s0 + s1 + (s2 + s3);
  y[y1] = t0 + t1 + (t2 + t3);
}

/** y[yOff..) = W x[xOff..) for one vector. */
export function linearVec(
  y: Float32Array,
  yOff: number,
  w: Float32Array,
  wOff: number,
  x: Float32Array,
  xOff: number,
  outDim: number,
  inDim: number,
): void {
  for (let o = 0; o < outDim; o++) y[yOff + o] = dot(w, wOff + o * inDim, x, xOff, inDim);
}

/** y[yOff..) += x[xOff..) over n values. */
export function addInPlace(y: Float32Array, yOff: number, x: Float32Array, xOff: number, n: number): void {
  for (let i = 0; i < n; i++) y[yOff + i] = y[yOff + i]! + x[xOff + i]!;
}

