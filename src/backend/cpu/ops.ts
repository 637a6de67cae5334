// The CPU reference ops: each a small function over typed arrays + offsets, the living spec every GPU
// kernel is tested against. Storage is float32; sums accumulate in float64 (JS numbers) and round once
// on store, which is at least as exact as a float32 accumulator. Every op computes one row the same way
// whatever the batch, so a token's result never depends on what it was batched with.

/** Dot product of a[aOff..aOff+n) and b[bOff..bOff+n): four float64 accumulators in a fixed order. */
export function dot(a: Float32Array, aOff: number, b: Float32Array, bOff: number, n: number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    s0 += a[aOff + i]! * b[bOff + i]!;
    s1 += a[aOff + i + 1]! * b[bOff + i + 1]!;
    s2 += a[aOff + i + 2]! * b[bOff + i + 2]!;
    s3 += a[aOff + i + 3]! * b[bOff + i + 3]!;
  }
  for (; i < n; i++) s0 += a[aOff + i]! * b[bOff + i]!;
  return s0 + s1 + (s2 + s3);
}

/** Copy embedding row `token` of `table` ([V][H]) to out[outOff..outOff+H). */
export function embedding(out: Float32Array, outOff: number, table: Float32Array, token: number, h: number): void {
  out.set(table.subarray(token * h, token * h + h), outOff);
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
  for (let o = 0; o < outDim; o++) {
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

/**
 * RoPE tables as transformers builds them for Qwen3, in float32: inv_freq[i] = 1 / theta^(2i/d),
 * angle = pos * inv_freq, cos/sin of the float32 angle. Returns [positions][d/2] each (the two halves
 * of the rotate-half layout share a value, so half the table is enough).
 */
export function ropeTables(headDim: number, theta: number, positions: number): { cos: Float32Array; sin: Float32Array } {
  const half = headDim / 2;
  const invFreq = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const exponent = Math.fround((2 * i) / headDim);
    invFreq[i] = Math.fround(1 / Math.fround(Math.pow(theta, exponent)));
  }
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * invFreq[i]!);
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** Rotate-half RoPE on one head vector x[off..off+d) in place, at table row `pos`. */
export function rope(x: Float32Array, off: number, d: number, cos: Float32Array, sin: Float32Array, pos: number): void {
  const half = d >> 1;
  const t = pos * half;
  for (let i = 0; i < half; i++) {
    const c = cos[t + i]!;
    const s = sin[t + i]!;
    const a = x[off + i]!;
    const b = x[off + half + i]!;
    x[off + i] = a * c - b * s;
    x[off + half + i] = b * c + a * s;
  }
}

/** RMSNorm over each of `heads` head vectors of size d starting at off (q_norm / k_norm), in place. */
export function headNorm(x: Float32Array, off: number, heads: number, d: number, weight: Float32Array, eps: number): void {
  for (let h = 0; h < heads; h++) rmsnorm(x, off + h * d, x, off + h * d, weight, d, eps);
}

/**
 * Causal grouped-query attention of one token at position `pos` over cached keys/values 0..pos.
 * q: [numHeads][d] at qOff; kCache/vCache: [capacity][numKvHeads*d]; out: [numHeads][d] at outOff.
 * scores: scratch of at least pos+1 float64, acc: scratch of d float64. Softmax in float64, scale 1/sqrt(d).
 */
export function attention(
  out: Float32Array,
  outOff: number,
  q: Float32Array,
  qOff: number,
  kCache: Float32Array,
  vCache: Float32Array,
  pos: number,
  numHeads: number,
  numKvHeads: number,
  d: number,
  scores: Float64Array,
  acc: Float64Array,
): void {
  const group = numHeads / numKvHeads;
  const kvStride = numKvHeads * d;
  const scale = 1 / Math.sqrt(d);
  for (let h = 0; h < numHeads; h++) {
    const kvOff = ((h / group) | 0) * d;
    const qh = qOff + h * d;
    let max = -Infinity;
    for (let p = 0; p <= pos; p++) {
      const s = dot(q, qh, kCache, p * kvStride + kvOff, d) * scale;
      scores[p] = s;
      if (s > max) max = s;
    }
    let sum = 0;
    for (let p = 0; p <= pos; p++) {
      const e = Math.exp(scores[p]! - max);
      scores[p] = e;
      sum += e;
    }
    // Sum the values position by position (rows of the cache are contiguous), each output over p in order.
    const oh = outOff + h * d;
    acc.fill(0, 0, d);
    for (let p = 0; p <= pos; p++) {
      const e = scores[p]!;
      const v = p * kvStride + kvOff;
      for (let i = 0; i < d; i++) acc[i] = acc[i]! + e * vCache[v + i]!;
    }
    for (let i = 0; i < d; i++) out[oh + i] = acc[i]! / sum;
  }
}

/** Softmax of x[off..off+n) into probs[pOff..) (float64 math). */
export function softmax(probs: Float32Array, pOff: number, x: Float32Array, off: number, n: number): void {
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (x[off + i]! > max) max = x[off + i]!;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(x[off + i]! - max);
  for (let i = 0; i < n; i++) probs[pOff + i] = Math.exp(x[off + i]! - max) / sum;
}

/**
 * Top-k of probs[off..off+n): ids in descending probability, exact ties broken by lower id (as
 * torch.topk). Writes ids[idOff..idOff+k) and their probabilities to w[wOff..); renormalizes the k
 * weights to sum to 1 when `normalize`.
 */
export function topk(
  ids: Int32Array,
  idOff: number,
  w: Float32Array,
  wOff: number,
  probs: Float32Array,
  off: number,
  n: number,
  k: number,
  normalize: boolean,
): void {
  let sum = 0;
  for (let j = 0; j < k; j++) {
    let best = -1;
    let bestP = -Infinity;
    for (let e = 0; e < n; e++) {
      const p = probs[off + e]!;
      if (p > bestP && !taken(ids, idOff, j, e)) {
        best = e;
        bestP = p;
      }
    }
    ids[idOff + j] = best;
    w[wOff + j] = bestP;
    sum += w[wOff + j]!;
  }
  if (normalize) {
    const s = Math.fround(sum);
    for (let j = 0; j < k; j++) w[wOff + j] = w[wOff + j]! / s;
  }
}

function taken(ids: Int32Array, idOff: number, count: number, e: number): boolean {
  for (let j = 0; j < count; j++) if (ids[idOff + j] === e) return true;
  return false;
}

/** silu(x) = x * sigmoid(x), float32 result. */
export function silu(x: number): number {
  return Math.fround(x / (1 + Math.exp(-x)));
}

/**
 * One SwiGLU expert on one token: out = down(silu(gate x) * up x). The expert is one bank row:
 * gate [I][H] | up [I][H] | down [H][I] contiguous from rowOff. act: scratch of I floats.
 */
export function swigluExpert(
  out: Float32Array,
  outOff: number,
  bank: Float32Array,
  rowOff: number,
  x: Float32Array,
  xOff: number,
  hidden: number,
  inter: number,
  act: Float32Array,
): void {
  const upOff = rowOff + inter * hidden;
  const downOff = upOff + inter * hidden;
  for (let j = 0; j < inter; j++) {
    dot2Rows(pair, bank, rowOff + j * hidden, upOff + j * hidden, x, xOff, hidden);
    act[j] = silu(Math.fround(pair[0]!)) * Math.fround(pair[1]!);
  }
  for (let o = 0; o < hidden; o++) out[outOff + o] = dot(bank, downOff + o * inter, act, 0, inter);
}

/**
 * The same expert on two tokens at once (picks of one row are adjacent after the split): each weight
 * load serves both tokens. Bit-identical to two `swigluExpert` calls. act: scratch of 2*I floats.
 */
export function swigluExpertPair(
  out: Float32Array,
  outA: number,
  outB: number,
  bank: Float32Array,
  rowOff: number,
  x: Float32Array,
  xA: number,
  xB: number,
  hidden: number,
  inter: number,
  act: Float32Array,
): void {
  const upOff = rowOff + inter * hidden;
  const downOff = upOff + inter * hidden;
  for (let j = 0; j < inter; j++) {
    dot2Rows2(quad, bank, rowOff + j * hidden, upOff + j * hidden, x, xA, xB, hidden);
    act[j] = silu(Math.fround(quad[0]!)) * Math.fround(quad[1]!);
    act[inter + j] = silu(Math.fround(quad[2]!)) * Math.fround(quad[3]!);
  }
  for (let o = 0; o < hidden; o++) dot2(out, outA + o, outB + o, bank, downOff + o * inter, act, 0, inter, inter);
}

/** Gate and up sums of one intermediate unit for two tokens. */
const quad = new Float64Array(4);

/** `dot2Rows` for two inputs: r = [a0.xA, a1.xA, a0.xB, a1.xB], each in exactly `dot`'s order. */
function dot2Rows2(r: Float64Array, a: Float32Array, a0: number, a1: number, x: Float32Array, xA: number, xB: number, n: number): void {
  let g0 = 0, g1 = 0, g2 = 0, g3 = 0, u0 = 0, u1 = 0, u2 = 0, u3 = 0; // prettier-ignore
  let h0 = 0, h1 = 0, h2 = 0, h3 = 0, v0 = 0, v1 = 0, v2 = 0, v3 = 0; // prettier-ignore
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const ga = a[a0 + i]!;
    const gb = a[a0 + i + 1]!;
    const gc = a[a0 + i + 2]!;
    const gd = a[a0 + i + 3]!;
    const ua = a[a1 + i]!;
    const ub = a[a1 + i + 1]!;
    const uc = a[a1 + i + 2]!;
    const ud = a[a1 + i + 3]!;
    let p = x[xA + i]!;
    g0 += ga * p;
    u0 += ua * p;
    p = x[xA + i + 1]!;
    g1 += gb * p;
    u1 += ub * p;
    p = x[xA + i + 2]!;
    g2 += gc * p;
    u2 += uc * p;
    p = x[xA + i + 3]!;
    g3 += gd * p;
    u3 += ud * p;
    p = x[xB + i]!;
    h0 += ga * p;
    v0 += ua * p;
    p = x[xB + i + 1]!;
    h1 += gb * p;
    v1 += ub * p;
    p = x[xB + i + 2]!;
    h2 += gc * p;
    v2 += uc * p;
    p = x[xB + i + 3]!;
    h3 += gd * p;
    v3 += ud * p;
  }
  for (; i < n; i++) {
    g0 += a[a0 + i]! * x[xA + i]!;
    u0 += a[a1 + i]! * x[xA + i]!;
    h0 += a[a0 + i]! * x[xB + i]!;
    v0 += a[a1 + i]! * x[xB + i]!;
  }
  r[0] = g0 + g1 + (g2 + g3);
  r[1] = u0 + u1 + (u2 + u3);
  r[2] = h0 + h1 + (h2 + h3);
  r[3] = v0 + v1 + (v2 + v3);
}

/** The gate and up sums of one intermediate unit (module scratch: the ops are single-threaded). */
const pair = new Float64Array(2);

/**
 * Two dot products sharing the second operand (a gate row and an up row against one x):
 * r[0] = a[a0..).x, r[1] = a[a1..).x, each in exactly `dot`'s order.
 */
function dot2Rows(r: Float64Array, a: Float32Array, a0: number, a1: number, x: Float32Array, xOff: number, n: number): void {
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
    const x0 = x[xOff + i]!;
    const x1 = x[xOff + i + 1]!;
    const x2 = x[xOff + i + 2]!;
    const x3 = x[xOff + i + 3]!;
    s0 += a[a0 + i]! * x0;
    s1 += a[a0 + i + 1]! * x1;
    s2 += a[a0 + i + 2]! * x2;
    s3 += a[a0 + i + 3]! * x3;
    t0 += a[a1 + i]! * x0;
    t1 += a[a1 + i + 1]! * x1;
    t2 += a[a1 + i + 2]! * x2;
    t3 += a[a1 + i + 3]! * x3;
  }
  for (; i < n; i++) {
    s0 += a[a0 + i]! * x[xOff + i]!;
    t0 += a[a1 + i]! * x[xOff + i]!;
  }
  r[0] = s0 + s1 + (s2 + s3);
  r[1] = t0 + t1 + (t2 + t3);
}

/** y[yOff..) += x[xOff..) over n values. */
export function addInPlace(y: Float32Array, yOff: number, x: Float32Array, xOff: number, n: number): void {
  for (let i = 0; i < n; i++) y[yOff + i] = y[yOff + i]! + x[xOff + i]!;
}

/** Index of the largest value (first on ties, as torch.argmax). */
export function argmax(x: Float32Array, off: number, n: number): number {
  let best = 0;
  let bestV = x[off]!;
  for (let i = 1; i < n; i++) {
    if (x[off + i]! > bestV) {
      bestV = x[off + i]!;
      best = i;
    }
  }
  return best;
}
