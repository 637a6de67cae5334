// DeepSeek-V3's latent attention kernels at its shapes (128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128,
// YaRN x40) against the CPU: the norms, interleaved RoPE and latent cache write; the query absorbed into latent space
// through kv_b_proj's W_UK; attention over the latent cache; the values out through W_UV (kv_b_proj in bf16 and in
// block FP8, read by the CPU's dequantizing reader). Then the three in a row against the CPU spec's expanded form
// (family-attention.ts mlaAttention: every head's key [W_UK c, k_rope] and value W_UV c, softmax over them): the same
// products in another order. Absorbed outputs are compared on a sample of heads (all 128 are checked written).
import { routeModeOf, type MlaArgs } from '../../../src/backend/cuda/step/kernel-args.ts';
import { mlaAttendLaunch, mlaNormRopeKvLaunch, mlaOAbsorbLaunch, mlaQAbsorbLaunch } from '../../../src/backend/cuda/step/launches.ts';
import { rmsnorm } from '../../../src/backend/cpu/linalg.ts';
import { attendHead, ropeFrequencies, ropeInterleaved, ropeTablesFor, type HeadLayout } from '../../../src/backend/cpu/family-attention.ts';
import { dequantRow } from '../../../src/model/quant.ts';
import type { WeightFormat } from '../../../src/backend/cuda/weights/device-weights.ts';
import type { OpDevice } from './device.ts';
import type { Draw } from './draw.ts';
import { FAMILIES } from './shapes.ts';
import { FORMAT_NAME } from './products.ts';
import { BAR, nonFinite, normErr, record } from './report.ts';
import { uploadStep } from './step-rows.ts';
import { drawWeights, matrixDot, type Weights } from './weights.ts';

/** A contiguous cache as one block (attendHead reads through a block table). */
const WHOLE = Int32Array.of(0);
const WHOLE_BLOCK = 2 ** 30;

const LAYERS = 2, LAYER = 1;

/** The shapes, the RoPE on both sides, and the weights of one case. */
function setup(dev: OpDevice, draw: Draw, format: WeightFormat, maxPos: number) {
  const s = FAMILIES.deepseek.spec, m = s.mla!;
  const nh = s.numHeads, rope = s.headDim, nope = m.qkNopeDim, vd = m.vHeadDim, kvLora = m.kvLoraRank, qLora = m.qLoraRank;
  const D = kvLora + rope, qk = nope + rope;
  const tables = ropeTablesFor({ ...s, maxPositions: maxPos + 1 });
  const { invFreq, scale: mscale } = ropeFrequencies(s);
  const kvB = drawWeights(draw, format, [nh * (nope + vd)], kvLora);
  const qan = draw.bf16(qLora, 1), kvan = draw.bf16(kvLora, 1);
  const args: MlaArgs = {
    qANorm: dev.upload(qan.bits, 'q_a_norm'), kvANorm: dev.upload(kvan.bits, 'kv_a_norm'), kvB: dev.upload(kvB.values, 'kv_b'),
    kvBScales: kvB.scales ? dev.upload(kvB.scales, 'kv_b scales') : 0n, ...kvB.grid, invFreq: dev.upload(invFreq, 'inv_freq'),
    eps: s.rmsNormEps, mscale, scale: m.softmaxScale, nh, qLora, kvLora, rope, nope, vd, layer: LAYER,
  };
  return { s, nh, rope, nope, vd, kvLora, qLora, D, qk, tables, kvB, qan: qan.f32, kvan: kvan.f32, args };
}

type Setup = ReturnType<typeof setup>;

/**
 * The rows' latent caches as one paged pool of T blocks of max(cap) positions (row t: block t, [L][bs][D]), poisoned
 * but for layer LAYER's positions [0, upTo[t]) (random latent rows).
 */
function latentCaches(dev: OpDevice, draw: Draw, x: Setup, cap: readonly number[], upTo: readonly number[]) {
  const bs = Math.max(...cap);
  const rowFloats = LAYERS * bs * x.D;
  const all = new Float32Array(cap.length * rowFloats);
  new Uint32Array(all.buffer).fill(0xffffffff);
  const host = cap.map((_, t) => {
    const a = all.subarray(t * rowFloats, (t + 1) * rowFloats);
    a.set(draw.f32(upTo[t]! * x.D, 1), LAYER * bs * x.D);
    return Float32Array.from(a);
  });
  const pool = dev.guarded(all, 'latent pool');
  const devs = host.map((_, t) => pool + BigInt(4 * t * rowFloats));
  const kv = { pool, blockSize: bs, layers: LAYERS, tables: host.map((_, t) => [t]) };
  /** Row t's layer LAYER positions [0, n) as the CPU reads them. */
  const layer = (t: number): Float32Array => host[t]!.subarray(LAYER * bs * x.D);
  return { host, devs, kv, bs, layer };
}

/** Heads compared: the first, the last and a few drawn. */
function sampleHeads(draw: Draw, nh: number, n: number): number[] {
  return [...new Set([0, nh - 1, ...draw.distinct(n, nh)])].sort((a, b) => a - b);
}

/** kv_b_proj's rows [r0, r0 + n) dequantized (the CPU's reader). */
function kvBRows(w: Weights, r0: number, n: number, cols: number): Float32Array {
  const out = new Float32Array(n * cols);
  for (let i = 0; i < n; i++) dequantRow(w.parts[0]!, r0 + i, out.subarray(i * cols, (i + 1) * cols));
  return out;
}

function normRopeKv(dev: OpDevice, draw: Draw): void {
  const pos = [0, 3, 77, 500, 4000], T = pos.length, cap = pos.map((p) => p + 2);
  try {
    const x = setup(dev, draw, 'bf16', Math.max(...cap));
    const A = x.qLora + x.kvLora + x.rope;
    const a0 = draw.f32(T * A, 3);
    const aDev = dev.guarded(a0, 'q_a|kv_a');
    const caches = latentCaches(dev, draw, x, cap, pos.map(() => 0));
    const step = uploadStep(dev, T, { valid: T, count: false, pos, kv: caches.kv });
    const l = mlaNormRopeKvLaunch(T, { a: aDev, lda: A, rows: step.rows, m: x.args });
    dev.run(l);
    const a = dev.readF32(aDev, T * A);
    const got: number[] = [], want: number[] = [], problems: string[] = [];
    const tmp = new Float32Array(x.rope);
    for (let t = 0; t < T; t++) {
      const q = new Float32Array(x.qLora), kv = new Float32Array(x.D);
      rmsnorm(q, 0, a0, t * A, x.qan, x.qLora, x.s.rmsNormEps);
      rmsnorm(kv, 0, a0, t * A + x.qLora, x.kvan, x.kvLora, x.s.rmsNormEps);
      kv.set(a0.subarray(t * A + x.qLora + x.kvLora, (t + 1) * A), x.kvLora);
      ropeInterleaved(kv, x.kvLora, x.rope, x.tables.cos, x.tables.sin, pos[t]!, tmp);
      const c = new Float32Array(dev.read(caches.devs[t]!, caches.host[t]!.byteLength).buffer);
      const at = (LAYER * caches.bs + pos[t]!) * x.D;
      // The q latent and c are normalized in place (c on its way to the cache); k_rope is left as it came.
      got.push(...a.subarray(t * A, t * A + x.qLora + x.kvLora), ...c.subarray(at, at + x.D));
      want.push(...q, ...kv.subarray(0, x.kvLora), ...kv);
      for (let i = x.qLora + x.kvLora; i < A; i++) if (a[t * A + i] !== a0[t * A + i]) { problems.push(`row ${t}: k_rope changed in place`); break; }
      const cu = new Uint32Array(c.buffer), hu = new Uint32Array(caches.host[t]!.buffer);
      for (let i = 0; i < cu.length; i++) if ((i < at || i >= at + x.D) && cu[i] !== hu[i]) { problems.push(`row ${t}: cache written outside its position`); break; }
    }
    record(l.name, `deepseek_v3 q_lora ${x.qLora} kv_lora ${x.kvLora} rope ${x.rope} T${T} pos ${pos.join('/')} yarn`, 'f32', normErr(got, want), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

function qAbsorb(dev: OpDevice, draw: Draw, format: WeightFormat): void {
  const T = 10, pos = Array.from({ length: T }, () => draw.int(2000));
  try {
    const x = setup(dev, draw, format, 2000);
    const q = draw.f32(T * x.nh * x.qk, 2);
    const qlat = dev.poisoned(4 * T * x.nh * x.D, 'q latent');
    const step = uploadStep(dev, T, { valid: T, count: false, pos });
    const l = mlaQAbsorbLaunch(format, T, { q: dev.upload(q, 'q'), rows: step.rows, qlat, m: x.args });
    dev.run(l);
    const got = dev.readF32(qlat, T * x.nh * x.D);
    const problems: string[] = [];
    if (nonFinite(got) > 0) problems.push(`${nonFinite(got)} of ${got.length} outputs not written (or not finite)`);
    if (!dev.guardIntact(qlat, 4 * got.length)) problems.push('wrote past q latent');
    const heads = sampleHeads(draw, x.nh, 6);
    const g: number[] = [], w: number[] = [];
    const tmp = new Float32Array(x.rope), r = new Float32Array(x.rope);
    for (const h of heads) {
      const wuk = kvBRows(x.kvB, h * (x.nope + x.vd), x.nope, x.kvLora);
      for (let t = 0; t < T; t++) {
        const qo = (t * x.nh + h) * x.qk, lo = (t * x.nh + h) * x.D;
        for (let c = 0; c < x.kvLora; c++) {
          let acc = 0;
          for (let d = 0; d < x.nope; d++) acc += wuk[d * x.kvLora + c]! * q[qo + d]!;
          w.push(Math.fround(acc));
        }
        r.set(q.subarray(qo + x.nope, qo + x.qk));
        ropeInterleaved(r, 0, x.rope, x.tables.cos, x.tables.sin, pos[t]!, tmp);
        w.push(...r);
        g.push(...got.subarray(lo, lo + x.D));
      }
    }
    record(l.name, `deepseek_v3 nh${x.nh} nope ${x.nope} kv_lora ${x.kvLora} T${T} (heads ${heads.join(',')})`, FORMAT_NAME[format], normErr(g, w), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

function attend(dev: OpDevice, draw: Draw): void {
  const pos = [0, 77, 300], T = pos.length, cap = pos.map((p) => p + 4);
  try {
    const x = setup(dev, draw, 'bf16', Math.max(...cap));
    const qlat = draw.f32(T * x.nh * x.D, 1);
    const caches = latentCaches(dev, draw, x, cap, pos.map((p) => p + 1));
    const step = uploadStep(dev, T, { valid: T, count: false, pos, kv: caches.kv });
    const olat = dev.poisoned(4 * T * x.nh * x.kvLora, 'o latent');
    const l = mlaAttendLaunch(T, { qlat: dev.upload(qlat, 'q latent'), rows: step.rows, olat, m: x.args });
    dev.run(l);
    const got = dev.readF32(olat, T * x.nh * x.kvLora);
    const problems: string[] = [];
    if (nonFinite(got) > 0) problems.push(`${nonFinite(got)} of ${got.length} outputs not written (or not finite)`);
    if (!dev.guardIntact(olat, 4 * got.length)) problems.push('wrote past o latent');
    const heads = sampleHeads(draw, x.nh, 14);
    const layout: HeadLayout = { qkDim: x.D, vDim: x.kvLora, kStride: x.D, vStride: x.D, scale: x.args.scale, window: 0 };
    const scores = new Float64Array(Math.max(...cap)), acc = new Float64Array(x.kvLora), out = new Float32Array(x.kvLora);
    const g: number[] = [], w: number[] = [];
    for (let t = 0; t < T; t++) {
      const c = caches.layer(t);
      for (const h of heads) {
        attendHead(out, 0, qlat, (t * x.nh + h) * x.D, c, 0, c, 0, WHOLE, 0, WHOLE_BLOCK, pos[t]!, layout, undefined, scores, acc);
        w.push(...out);
        g.push(...got.subarray((t * x.nh + h) * x.kvLora, (t * x.nh + h + 1) * x.kvLora));
      }
    }
    record(l.name, `deepseek_v3 nh${x.nh} kv_lora ${x.kvLora} rope ${x.rope} T${T} pos ${pos.join('/')} (heads ${heads.length} of ${x.nh})`, 'f32', normErr(g, w), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

function oAbsorb(dev: OpDevice, draw: Draw, format: WeightFormat): void {
  const T = 3;
  try {
    const x = setup(dev, draw, format, 1);
    const olat = draw.f32(T * x.nh * x.kvLora, 1);
    const att = dev.poisoned(4 * T * x.nh * x.vd, 'att');
    const l = mlaOAbsorbLaunch(format, T, { olat: dev.upload(olat, 'o latent'), att, m: x.args });
    dev.run(l);
    const got = dev.readF32(att, T * x.nh * x.vd);
    const problems: string[] = [];
    if (nonFinite(got) > 0) problems.push(`${nonFinite(got)} of ${got.length} outputs not written (or not finite)`);
    if (!dev.guardIntact(att, 4 * got.length)) problems.push('wrote past att');
    const n = T * x.nh * x.vd, at = Array.from({ length: 2048 }, () => draw.int(n));
    const ref = at.map((i) => {
      const t = Math.floor(i / (x.nh * x.vd)), f = i % (x.nh * x.vd), h = Math.floor(f / x.vd), d = f % x.vd;
      return Math.fround(matrixDot(x.kvB.parts[0]!, h * (x.nope + x.vd) + x.nope + d, olat, (t * x.nh + h) * x.kvLora));
    });
    record(l.name, `deepseek_v3 nh${x.nh} v ${x.vd} kv_lora ${x.kvLora} T${T}`, FORMAT_NAME[format], normErr(at.map((i) => got[i]!), ref), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

/** q_absorb, attend, o_absorb in a row against the CPU spec's expanded attention (every head's keys and values). */
function chain(dev: OpDevice, draw: Draw, format: WeightFormat): void {
  const pos = [40, 90], T = pos.length, cap = pos.map((p) => p + 2);
  try {
    const x = setup(dev, draw, format, Math.max(...cap));
    // Queries small enough that the logits stay O(1) through W_UK (a softmax of logits in the hundreds would
    // weigh float32's rounding of them, not the kernels' order of sums).
    const q = draw.f32(T * x.nh * x.qk, 0.1);
    const caches = latentCaches(dev, draw, x, cap, pos.map((p) => p + 1));
    const step = uploadStep(dev, T, { valid: T, count: false, pos, kv: caches.kv });
    const qlat = dev.poisoned(4 * T * x.nh * x.D, 'q latent'), olat = dev.poisoned(4 * T * x.nh * x.kvLora, 'o latent'), att = dev.poisoned(4 * T * x.nh * x.vd, 'att');
    const ls = [
      mlaQAbsorbLaunch(format, T, { q: dev.upload(q, 'q'), rows: step.rows, qlat, m: x.args }),
      mlaAttendLaunch(T, { qlat, rows: step.rows, olat, m: x.args }),
      mlaOAbsorbLaunch(format, T, { olat, att, m: x.args }),
    ];
    for (const l of ls) dev.run(l);
    const got = dev.readF32(att, T * x.nh * x.vd);
    const problems: string[] = [];
    if (nonFinite(got) > 0) problems.push(`${nonFinite(got)} of ${got.length} outputs not written (or not finite)`);
    const heads = sampleHeads(draw, x.nh, 1);
    const layout: HeadLayout = { qkDim: x.qk, vDim: x.vd, kStride: x.qk, vStride: x.vd, scale: x.args.scale, window: 0 };
    const scores = new Float64Array(Math.max(...cap)), acc = new Float64Array(x.vd), out = new Float32Array(x.vd), tmp = new Float32Array(x.rope);
    const g: number[] = [], w: number[] = [];
    for (const h of heads) {
      const wkv = kvBRows(x.kvB, h * (x.nope + x.vd), x.nope + x.vd, x.kvLora);
      for (let t = 0; t < T; t++) {
        // The spec's expanded cache: k = [W_UK c_p, k_rope_p], v = W_UV c_p, each a float32 projection of the latent row.
        const c = caches.layer(t), n = pos[t]! + 1;
        const keys = new Float32Array(n * x.qk), values = new Float32Array(n * x.vd);
        for (let p = 0; p < n; p++) {
          for (let d = 0; d < x.nope + x.vd; d++) {
            let s = 0;
            for (let j = 0; j < x.kvLora; j++) s += wkv[d * x.kvLora + j]! * c[p * x.D + j]!;
            if (d < x.nope) keys[p * x.qk + d] = s;
            else values[p * x.vd + d - x.nope] = s;
          }
          keys.set(c.subarray(p * x.D + x.kvLora, (p + 1) * x.D), p * x.qk + x.nope);
        }
        const qh = q.slice((t * x.nh + h) * x.qk, (t * x.nh + h + 1) * x.qk);
        ropeInterleaved(qh, x.nope, x.rope, x.tables.cos, x.tables.sin, pos[t]!, tmp);
        attendHead(out, 0, qh, 0, keys, 0, values, 0, WHOLE, 0, WHOLE_BLOCK, pos[t]!, layout, undefined, scores, acc);
        w.push(...out);
        g.push(...got.subarray((t * x.nh + h) * x.vd, (t * x.nh + h + 1) * x.vd));
      }
    }
    record(ls.map((l) => l.name).join('+'), `deepseek_v3 T${T} pos ${pos.join('/')} vs the expanded attention (heads ${heads.join(',')})`, FORMAT_NAME[format], normErr(g, w), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

export function mlaCases(dev: OpDevice, draw: Draw): void {
  dev.raise(FAMILIES.deepseek.spec, routeModeOf(FAMILIES.deepseek.spec));
  normRopeKv(dev, draw);
  attend(dev, draw);
  for (const f of ['bf16', 'fp8'] as const) {
    qAbsorb(dev, draw, f);
    oAbsorb(dev, draw, f);
    chain(dev, draw, f);
  }
}
