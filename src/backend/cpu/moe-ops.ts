// The MoE ops of the CPU reference: router softmax and top-k, and the SwiGLU expert read from a bank row.
import { dot, dot2 } from './linalg.ts';

/** exp(x - max) of each value: computed once, divided by the sum after (one scratch a thread: a worker has its own module). */
let softmaxExp = new Float64Array(0);

/** Softmax of x[off..off+n) into probs[pOff..) (float64 math). */
export function softmax(probs: Float32Array, pOff: number, x: Float32Array, off: number, n: number): void {
  if (softmaxExp.length < n) softmaxExp = new Float64Array(n);
  const ex = softmaxExp;
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (x[off + i]! > max) max = x[off + i]!;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const e = Math.exp(x[off + i]! - max);
    ex[i] = e;
    sum += e;
  }
  for (let i = 0; i < n; i++) probs[pOff + i] = ex[i]! / sum;
}

/**
 * The router of moe.ts on tokens [t0, t1) from their logits ([T][E]): softmax into probs, then top-k into ids and
 * w ([T][K]). Each token's route depends on its own logits alone, so threads may take parts of a step's tokens.
 */
export function routeTokens(logits: Float32Array, probs: Float32Array, ids: Int32Array, w: Float32Array, t0: number, t1: number, E: number, K: number, normalize: boolean): void {
  for (let t = t0; t < t1; t++) {
    softmax(probs, t * E, logits, t * E, E);
    topk(ids, t * K, w, t * K, probs, t * E, E, K, normalize);
  }
}

/**
 * out[t][o] = sum over k in order of float32(w[t][k] * pick[t*K+k][o]) in float64, rounded once on store: an MoE
 * layer's combine of its picks' outputs in router order (independent of bank placement).
 */
export function combinePicks(out: Float32Array, w: Float32Array, pickOut: Float32Array, tokens: number, K: number, H: number): void {
  for (let t = 0; t < tokens; t++) {
    for (let o = 0; o < H; o++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += Math.fround(w[t * K + k]! * pickOut[(t * K + k) * H + o]!);
      out[t * H + o] = acc;
    }
  }
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
  // One pass keeping the k best so far in order (a tie keeps the earlier, lower id first): the same picks as k
  // passes of "the largest not yet taken, the first on ties". A value not above -Infinity (or NaN) is never
  // picked: a slot left over keeps id -1 with -Infinity, as such a pass would leave it.
  for (let j = 0; j < k; j++) {
    ids[idOff + j] = -1;
    w[wOff + j] = -Infinity;
  }
  const last = wOff + k - 1;
  for (let e = 0; e < n; e++) {
    const p = probs[off + e]!;
    if (!(p > w[last]!)) continue;
    let j = k - 1;
    for (; j > 0 && p > w[wOff + j - 1]!; j--) {
      w[wOff + j] = w[wOff + j - 1]!;
      ids[idOff + j] = ids[idOff + j - 1]!;
    }
    w[wOff + j] = p;
    ids[idOff + j] = e;
  }
  let sum = 0;
  for (let j = 0; j < k; j++) sum += w[wOff + j]!;
  if (normalize) {
    const s = Math.fround(sum);
    for (let j = 0; j < k; j++) w[wOff + j] = w[wOff + j]! / s;
  }
}

/** silu(x) = x * sigmoid(x), float32 result. */
export function silu(x: number): number {
  return Math.fround(x / (1 + Math.exp(-x)));
}

/** SwiGLU of one intermediate unit from its gate and up sums: silu(gate) * up, each rounded to float32 first. */
export function swigluAct(gate: number, up: number): number {
  return silu(Math.fround(gate)) * Math.fround(up);
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
    act[j] = swigluAct(pair[0]!, pair[1]!);
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
    act[j] = swigluAct(quad[0]!, quad[1]!);
    act[inter + j] = swigluAct(quad[2]!, quad[3]!);
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

/**
 * One gpt-oss expert on one token (transformers GptOssExperts, float32): gate = gate x + bg clamped above
 * at `limit`, up = up x + bu clamped to [-limit, limit], act = (up + 1) * gate * sigmoid(alpha gate),
 * out = down act + bd. The bank row: gate [I][H] | up [I][H] | down [H][I] | bg [I] | bu [I] | bd [H].
 * act: scratch of I floats.
 */
export function clampedSwigluExpert(
  out: Float32Array,
  outOff: number,
  bank: Float32Array,
  rowOff: number,
  x: Float32Array,
  xOff: number,
  hidden: number,
  inter: number,
  c: { readonly limit: number; readonly alpha: number },
  act: Float32Array,
): void {
  const upOff = rowOff + inter * hidden;
  const downOff = upOff + inter * hidden;
  const biasOff = downOff + hidden * inter;
  for (let j = 0; j < inter; j++) {
    act[j] = clampedAct(dot(bank, rowOff + j * hidden, x, xOff, hidden), dot(bank, upOff + j * hidden, x, xOff, hidden), bank[biasOff + j]!, bank[biasOff + inter + j]!, c);
  }
  for (let o = 0; o < hidden; o++) {
    out[outOff + o] = Math.fround(dot(bank, downOff + o * inter, act, 0, inter)) + bank[biasOff + 2 * inter + o]!;
  }
}

/**
 * gpt-oss's activation of one intermediate unit from its gate and up sums and biases (float32 steps as
 * transformers): gate clamped above at `limit`, up to [-limit, limit], (up + 1) * gate * sigmoid(alpha gate).
 */
export function clampedAct(gateSum: number, upSum: number, gateBias: number, upBias: number, c: { readonly limit: number; readonly alpha: number }): number {
  const limit = Math.fround(c.limit);
  const alpha = Math.fround(c.alpha);
  const g = Math.min(Math.fround(Math.fround(gateSum) + gateBias), limit);
  const u = Math.min(Math.max(Math.fround(Math.fround(upSum) + upBias), -limit), limit);
  const glu = Math.fround(g * Math.fround(1 / (1 + Math.exp(-Math.fround(g * alpha)))));
  return Math.fround(u + 1) * glu;
}
