// The dense products against the CPU's dots: every gemv entry (bf16, block FP8, MXFP4 x batch buckets 1-16 x R 1, 2 x
// store, add, SwiGLU), the bias and gpt-oss's clamped interleaved SwiGLU, the norm fused into a gemv (normW), the
// batch-1 q | k | v split over one wave (_even), the FP8 grid of stacked matrices whose boundaries cut its blocks,
// and the tensor-core tiles of each format and epilogue.
import type { GemmArgs } from '../../../src/backend/cuda/step/kernel-args.ts';
import { gemmTcLaunch, gemvEvenLaunch, gemvLaunch, type Launch } from '../../../src/backend/cuda/step/launches.ts';
import { oneWaveFeatureBlocks } from '../../../src/backend/cuda/step/plan.ts';
import type { WeightFormat } from '../../../src/backend/cuda/weights/device-weights.ts';
import { rmsnorm } from '../../../src/backend/cpu/linalg.ts';
import { clampedAct, swigluAct } from '../../../src/backend/cpu/moe-ops.ts';
import type { ClampedSwiglu } from '../../../src/model/spec.ts';
import type { OpDevice } from './device.ts';
import type { Draw } from './draw.ts';
import { FAMILIES } from './shapes.ts';
import { BAR, nonFinite, normErr, record } from './report.ts';
import { drawWeights, rowDot, type Weights } from './weights.ts';

export type Epi = 'store' | 'add' | 'swiglu';

/** How a product ends: its bias (bf16, by weight row), SwiGLU's clamp and gate | up interleaving (gpt-oss). */
export interface Ending {
  readonly epi: Epi;
  readonly bias?: { bits: Uint16Array; f32: Float32Array };
  readonly clamped?: ClampedSwiglu;
  readonly interleaved?: boolean;
}

/** Weight rows of SwiGLU unit j: gate and up (product.cuh gate_row / up_row). */
export function unitRows(j: number, units: number, interleaved: boolean): [number, number] {
  return interleaved ? [2 * j, 2 * j + 1] : [j, units + j];
}

/** Output features of a product of `rows` weight rows ending so (SwiGLU: its units). */
export function featuresOf(rows: number, epi: Epi): number {
  return epi === 'swiglu' ? rows / 2 : rows;
}

/**
 * The CPU's value of feature f of one row: `dot(r)` is weight row r . the row's input (float32); `res` its residual
 * (add). As the CPU backend ends a product: the bias added to the float32 sum, then the residual; SwiGLU on the unit's
 * gate and up sums (clamped with their biases for gpt-oss).
 */
export function endingRef(e: Ending, f: number, O: number, dot: (r: number) => number, res = 0): number {
  const b = (r: number): number => e.bias?.f32[r] ?? 0;
  if (e.epi === 'swiglu') {
    const [g, u] = unitRows(f, O, e.interleaved === true);
    if (e.clamped) return clampedAct(dot(g), dot(u), b(g), b(u), e.clamped);
    return swigluAct(Math.fround(dot(g) + b(g)), Math.fround(dot(u) + b(u)));
  }
  const y = Math.fround(dot(f) + b(f));
  return e.epi === 'add' ? Math.fround(res + y) : y;
}

/** How many outputs to compare: all of them when few, else enough that the CPU's sums stay near 4M multiply-adds. */
export function sampleCount(outputs: number, K: number, epi: Epi): number {
  return Math.min(outputs, Math.max(128, Math.min(1024, Math.floor(4e6 / (K * (epi === 'swiglu' ? 2 : 1))))));
}

/** Positions to compare among n (every one when `count` >= n). */
export function samplePositions(draw: Draw, n: number, count: number): number[] {
  if (count >= n) return Array.from({ length: n }, (_, i) => i);
  return Array.from({ length: count }, () => draw.int(n));
}

/** A product's weights on the device (kept for the cases that read them). */
export interface WeightsDev {
  readonly w: bigint;
  readonly scales?: bigint;
}

export function uploadWeights(dev: OpDevice, w: Weights): WeightsDev {
  return dev.keep(() => ({ w: dev.upload(w.values, 'w'), ...(w.scales ? { scales: dev.upload(w.scales, 'scales') } : {}) }));
}

interface DenseRun {
  readonly kernel: string;
  readonly err: number;
  readonly problems: string[];
}

/**
 * One dense product of `rows` input rows on the device against the CPU: inputs drawn, outputs poisoned, launched as
 * `launchOf` builds it from the GemmProblem. `normW`: the rows RMSNormed by it first (and written to normOut when asked).
 */
export function runDense(dev: OpDevice, draw: Draw, w: Weights, e: Ending, rows: number, launchOf: (a: GemmArgs) => Launch, extra: { normW?: boolean; normOut?: boolean; eps?: number; wDev?: WeightsDev } = {}): DenseRun {
  const K = w.cols, O = featuresOf(w.rows, e.epi);
  try {
    const wDev = extra.wDev ?? { w: dev.upload(w.values, 'w'), ...(w.scales ? { scales: dev.upload(w.scales, 'scales') } : {}) };
    const x = draw.f32(rows * K);
    const res = e.epi === 'add' ? draw.f32(rows * O) : undefined;
    const nw = extra.normW ? draw.bf16(K, 1) : undefined;
    const eps = extra.eps ?? 1e-6;
    const yDev = dev.poisoned(4 * rows * O, 'y');
    const normOut = nw && extra.normOut ? dev.poisoned(4 * rows * K, 'normOut') : undefined;
    const a: GemmArgs = {
      x: dev.upload(x, 'x'), y: yDev, ...(res ? { res: dev.upload(res, 'res') } : {}), ...wDev, ldx: K, ldy: O, O, K, rows, ...w.grid,
      ...(e.bias ? { bias: dev.upload(e.bias.bits, 'bias') } : {}), ...(e.clamped ? { limit: e.clamped.limit, alpha: e.clamped.alpha } : {}), guInterleave: e.interleaved === true,
      ...(nw ? { normW: dev.upload(nw.bits, 'normW'), eps, ...(normOut ? { normOut } : {}) } : {}),
      early: true, l2: 1,
    };
    const l = launchOf(a);
    dev.run(l);
    const y = new Float32Array(dev.read(yDev, 4 * rows * O).buffer);
    const problems: string[] = [];
    const unwritten = nonFinite(y);
    if (unwritten > 0) problems.push(`${unwritten} of ${rows * O} outputs not written (or not finite)`);
    if (!dev.guardIntact(yDev, 4 * rows * O)) problems.push('wrote past its outputs');
    // The CPU's input rows: as drawn, or RMSNormed (the CPU's rmsnorm, weight widened from bf16).
    const xin = new Float32Array(x);
    if (nw) for (let r = 0; r < rows; r++) rmsnorm(xin, r * K, x, r * K, nw.f32, K, eps);
    if (normOut) {
      const got = new Float32Array(dev.read(normOut, 4 * rows * K).buffer);
      const ne = normErr(got, xin);
      if (!(ne <= BAR.f32)) problems.push(`normOut error ${ne} (bar ${BAR.f32})`);
    }
    const at = samplePositions(draw, rows * O, sampleCount(rows * O, K, e.epi));
    const ref = at.map((i) => {
      const r = Math.floor(i / O), f = i % O;
      return endingRef(e, f, O, (wr) => rowDot(w, wr, xin, r * K), res?.[i]);
    });
    return { kernel: l.name, err: normErr(at.map((i) => y[i]!), ref), problems };
  } finally {
    dev.release();
  }
}

export const FORMAT_NAME: Record<WeightFormat, string> = { bf16: 'bf16', fp8: 'fp8-e4m3 [128,128]', mxfp4: 'mxfp4-e2m1/e8m0' };

/** The gemv entries of one product: every batch bucket and both R. */
function gemvSweep(dev: OpDevice, draw: Draw, label: string, w: Weights, e: Ending): void {
  const O = featuresOf(w.rows, e.epi);
  const wDev = uploadWeights(dev, w);
  try {
    for (const B of [1, 2, 4, 8, 16] as const) {
      for (const R of [1, 2] as const) {
        const r = runDense(dev, draw, w, e, B, (a) => gemvLaunch(w.format, B, R, e.epi, 1, a), { wDev });
        record(r.kernel, `${label} O${O} K${w.cols} B${B}`, FORMAT_NAME[w.format], r.err, BAR.gemv, r.problems);
      }
    }
  } finally {
    dev.releaseKept();
  }
}

/** bf16 values of (-scale, scale) as a product's bias. */
function biasOf(draw: Draw, n: number): Ending['bias'] {
  return draw.bf16(n, 0.5);
}

export function denseGemvCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, deepseek, gptOss } = FAMILIES;
  const q = qwen3.spec, d = deepseek.spec, g = gptOss.spec, m = d.mla!;
  dev.raise(q, 'softmax_renorm');
  // bf16 at Qwen3-30B-A3B's shapes: q | k | v, o_proj (add), an expert's gate | up as one dense SwiGLU.
  gemvSweep(dev, draw, 'qwen3_moe q|k|v', drawWeights(draw, 'bf16', [q.numHeads * q.headDim, q.numKvHeads * q.headDim, q.numKvHeads * q.headDim], q.hiddenSize), { epi: 'store' });
  gemvSweep(dev, draw, 'qwen3_moe o_proj', drawWeights(draw, 'bf16', [q.hiddenSize], q.numHeads * q.headDim), { epi: 'add' });
  gemvSweep(dev, draw, 'qwen3_moe gate|up', drawWeights(draw, 'bf16', [q.expertIntermediate, q.expertIntermediate], q.hiddenSize), { epi: 'swiglu' });
  // Block FP8 at DeepSeek-V3's: q_a | kv_a (its last block rows partial), o_proj (add, K 16384: 16 chunks at B 16), the shared expert's gate | up.
  dev.raise(d, 'sigmoid_group');
  gemvSweep(dev, draw, 'deepseek_v3 q_a|kv_a', drawWeights(draw, 'fp8', [m.qLoraRank, m.kvLoraRank + d.headDim], d.hiddenSize), { epi: 'store' });
  gemvSweep(dev, draw, 'deepseek_v3 o_proj', drawWeights(draw, 'fp8', [d.hiddenSize], d.numHeads * m.vHeadDim), { epi: 'add' });
  gemvSweep(dev, draw, 'deepseek_v3 shared gate|up', drawWeights(draw, 'fp8', [d.sharedIntermediate!, d.sharedIntermediate!], d.hiddenSize), { epi: 'swiglu' });
  // MXFP4 at gpt-oss-20b's expert shapes as dense products (the kernels take any product so): down with its bias
  // (store, and add), gate | up interleaved, biased and clamped.
  dev.raise(g, 'topk_softmax');
  const H = g.hiddenSize, I = g.expertIntermediate;
  gemvSweep(dev, draw, 'gpt_oss down+bias', drawWeights(draw, 'mxfp4', [H], I), { epi: 'store', bias: biasOf(draw, H) });
  gemvSweep(dev, draw, 'gpt_oss down+bias', drawWeights(draw, 'mxfp4', [H], I), { epi: 'add', bias: biasOf(draw, H) });
  gemvSweep(dev, draw, 'gpt_oss gate_up clamped', drawWeights(draw, 'mxfp4', [2 * I], H), { epi: 'swiglu', bias: biasOf(draw, 2 * I), clamped: g.expertAct!, interleaved: true });
}

export function denseVariantCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, gptOss, tiny } = FAMILIES;
  const q = qwen3.spec, g = gptOss.spec;
  dev.raise(q, 'softmax_renorm');
  const qkvRows = [q.numHeads * q.headDim, q.numKvHeads * q.headDim, q.numKvHeads * q.headDim];
  const qkv = drawWeights(draw, 'bf16', qkvRows, q.hiddenSize);
  // The batch-1 q | k | v split evenly over one wave of this device's SMs (as the backend sizes it).
  for (const R of [1, 2] as const) {
    const blocks = oneWaveFeatureBlocks(qkv.rows, 1, R, dev.smCount);
    const r = runDense(dev, draw, qkv, { epi: 'store' }, 1, (a) => gemvEvenLaunch(R, blocks, 1, a));
    record(r.kernel, `qwen3_moe q|k|v O${qkv.rows} K${qkv.cols} B1 ${blocks} blocks`, 'bf16', r.err, BAR.gemv, r.problems);
  }
  // The input norm inside q | k | v (B <= 8 at hidden 2048: K staged whole), and the post-attention norm inside the
  // router, its normalized rows written out for the experts.
  for (const B of [1, 2, 4, 8] as const) {
    const r = runDense(dev, draw, qkv, { epi: 'store' }, B, (a) => gemvLaunch('bf16', B, 2, 'store', 1, a), { normW: true, eps: q.rmsNormEps });
    record(r.kernel, `qwen3_moe q|k|v+normW O${qkv.rows} K${qkv.cols} B${B}`, 'bf16', r.err, BAR.gemv, r.problems);
  }
  const router = drawWeights(draw, 'bf16', [q.numExperts], q.hiddenSize);
  for (const B of [1, 2, 4, 8] as const) {
    const r = runDense(dev, draw, router, { epi: 'store' }, B, (a) => gemvLaunch('bf16', B, 1, 'store', 1, a), { normW: true, normOut: true, eps: q.rmsNormEps });
    record(r.kernel, `qwen3_moe router+normW+normOut O${router.rows} K${router.cols} B${B}`, 'bf16', r.err, BAR.gemv, r.problems);
  }
  // gpt-oss: the router with its bias and the norm (B <= 4 at hidden 2880), q | k | v and o_proj with their biases.
  dev.raise(g, 'topk_softmax');
  const gRouter = drawWeights(draw, 'bf16', [g.numExperts], g.hiddenSize);
  const gBias = biasOf(draw, g.numExperts);
  for (const B of [1, 2, 4] as const) {
    const r = runDense(dev, draw, gRouter, { epi: 'store', bias: gBias }, B, (a) => gemvLaunch('bf16', B, 1, 'store', 1, a), { normW: true, normOut: true, eps: g.rmsNormEps });
    record(r.kernel, `gpt_oss router+bias+normW+normOut O${gRouter.rows} K${gRouter.cols} B${B}`, 'bf16', r.err, BAR.gemv, r.problems);
  }
  const gQkv = drawWeights(draw, 'bf16', [g.numHeads * g.headDim, g.numKvHeads * g.headDim, g.numKvHeads * g.headDim], g.hiddenSize);
  const gO = drawWeights(draw, 'bf16', [g.hiddenSize], g.numHeads * g.headDim);
  for (const B of [1, 16] as const) {
    const r = runDense(dev, draw, gQkv, { epi: 'store', bias: biasOf(draw, gQkv.rows) }, B, (a) => gemvLaunch('bf16', B, 2, 'store', 1, a));
    record(r.kernel, `gpt_oss q|k|v+bias O${gQkv.rows} K${gQkv.cols} B${B}`, 'bf16', r.err, BAR.gemv, r.problems);
    const o = runDense(dev, draw, gO, { epi: 'add', bias: biasOf(draw, gO.rows) }, B, (a) => gemvLaunch('bf16', B, 2, 'add', 1, a));
    record(o.kernel, `gpt_oss o_proj+bias O${gO.rows} K${gO.cols} B${B}`, 'bf16', o.err, BAR.gemv, o.problems);
  }
  // Stacked FP8 matrices whose boundaries cut the 128-row blocks: q | k | v of 96 | 32 | 32 rows, a grid of 32-row scale rows.
  const cut = drawWeights(draw, 'fp8', [96, 32, 32], 256);
  for (const B of [1, 4] as const) {
    const r = runDense(dev, draw, cut, { epi: 'store' }, B, (a) => gemvLaunch('fp8', B, 1, 'store', 1, a));
    record(r.kernel, `q|k|v 96|32|32 (grid of ${cut.grid.sRows}-row scale rows) O160 K256 B${B}`, FORMAT_NAME.fp8, r.err, BAR.gemv, r.problems);
  }
  // tiny-moe's q | k | v and o_proj: hidden 128, one chunk of loads shorter than a warp's.
  const t = tiny.spec;
  dev.raise(t, 'softmax_renorm');
  const tQkv = drawWeights(draw, 'bf16', [t.numHeads * t.headDim, t.numKvHeads * t.headDim, t.numKvHeads * t.headDim], t.hiddenSize);
  for (const B of [1, 2, 16] as const) {
    const r = runDense(dev, draw, tQkv, { epi: 'store' }, B, (a) => gemvLaunch('bf16', B, 1, 'store', 1, a));
    record(r.kernel, `tiny-moe q|k|v O${tQkv.rows} K${tQkv.cols} B${B}`, 'bf16', r.err, BAR.gemv, r.problems);
  }
}

/** The tensor-core tiles, dense: 100 rows (a partial second tile) of each format and epilogue. */
export function denseTcCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, deepseek, gptOss } = FAMILIES;
  const q = qwen3.spec, d = deepseek.spec, g = gptOss.spec;
  const T = 100;
  const cases: [string, Weights, Ending][] = [
    ['qwen3_moe q|k|v', drawWeights(draw, 'bf16', [q.numHeads * q.headDim, q.numKvHeads * q.headDim, q.numKvHeads * q.headDim], q.hiddenSize), { epi: 'store' }],
    ['qwen3_moe o_proj', drawWeights(draw, 'bf16', [q.hiddenSize], q.numHeads * q.headDim), { epi: 'add' }],
    ['qwen3_moe gate|up', drawWeights(draw, 'bf16', [q.expertIntermediate, q.expertIntermediate], q.hiddenSize), { epi: 'swiglu' }],
    ['deepseek_v3 q_a|kv_a', drawWeights(draw, 'fp8', [d.mla!.qLoraRank, d.mla!.kvLoraRank + d.headDim], d.hiddenSize), { epi: 'store' }],
    ['deepseek_v3 shared down', drawWeights(draw, 'fp8', [d.hiddenSize], d.sharedIntermediate!), { epi: 'add' }],
    ['deepseek_v3 shared gate|up', drawWeights(draw, 'fp8', [d.sharedIntermediate!, d.sharedIntermediate!], d.hiddenSize), { epi: 'swiglu' }],
    ['gpt_oss down+bias', drawWeights(draw, 'mxfp4', [g.hiddenSize], g.expertIntermediate), { epi: 'store', bias: biasOf(draw, g.hiddenSize) }],
    ['gpt_oss down+bias', drawWeights(draw, 'mxfp4', [g.hiddenSize], g.expertIntermediate), { epi: 'add', bias: biasOf(draw, g.hiddenSize) }],
    ['gpt_oss gate_up clamped', drawWeights(draw, 'mxfp4', [2 * g.expertIntermediate], g.hiddenSize), { epi: 'swiglu', bias: biasOf(draw, 2 * g.expertIntermediate), clamped: g.expertAct!, interleaved: true }],
  ];
  for (const [label, w, e] of cases) {
    const r = runDense(dev, draw, w, e, T, (a) => gemmTcLaunch(w.format, e.epi, Math.ceil(T / 64), a));
    record(r.kernel, `${label} O${featuresOf(w.rows, e.epi)} K${w.cols} T${T}`, FORMAT_NAME[w.format], r.err, BAR.tc, r.problems);
  }
}

