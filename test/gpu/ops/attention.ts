// Attention against the CPU's ops: OLMoE's whole-projection q/k norm; the per-head norm, RoPE (YaRN's frequencies and
// factor included) and KV write ahead of a prefill chunk (op_qk_rope_kv); attention of prefill rows (op_attend, q and
// k already rotated) and of decode rows with the norm, RoPE and KV write fused in (op_attend_decode), at every head
// dim and query-heads-a-kv-head the kernels take, one split or several merged by op_attend_merge, with gpt-oss's
// sinks and sliding window. The CPU: linalg's rmsnorm, attention-ops' rope, family-attention's attendHead.
import { encodeAttn } from '../../../src/backend/cuda/step/kernel-args.ts';
import { attendLaunch, attendMergeLaunch, qkNormWholeLaunch, qkRopeKvLaunch } from '../../../src/backend/cuda/step/launches.ts';
import type { AttendHeadDim } from '../../../src/backend/cuda/driver/kernels.ts';
import { routeModeOf } from '../../../src/backend/cuda/step/kernel-args.ts';
import { rmsnorm } from '../../../src/backend/cpu/linalg.ts';
import { rope } from '../../../src/backend/cpu/attention-ops.ts';
import { attendHead, ropeFrequencies, ropeTablesFor, type HeadLayout } from '../../../src/backend/cpu/family-attention.ts';
import type { ModelSpec } from '../../../src/model/spec.ts';
import type { OpDevice } from './device.ts';
import type { Draw } from './draw.ts';
import { FAMILIES } from './shapes.ts';
import { BAR, nonFinite, normErr, record } from './report.ts';
import { uploadStep } from './step-rows.ts';

/** A contiguous cache as one block (attendHead reads through a block table). */
const WHOLE = Int32Array.of(0);
const WHOLE_BLOCK = 2 ** 30;

/** A layer's attention as the kernels see it. */
interface AttnShape {
  readonly label: string;
  /** RoPE (theta, YaRN) and eps; headDim is this shape's. */
  readonly spec: ModelSpec;
  readonly nh: number;
  readonly nkv: number;
  readonly hd: AttendHeadDim;
  /** Per-head q/k RMSNorm (Qwen3); else none in the attention kernels. */
  readonly headNorm: boolean;
  readonly window: number;
  readonly sinks: boolean;
}

const LAYERS = 2, LAYER = 1;

function shapeOf(label: string, s: ModelSpec, over: Partial<AttnShape> = {}): AttnShape {
  return {
    label, spec: s, nh: s.numHeads, nkv: s.numKvHeads, hd: s.headDim as AttendHeadDim, headNorm: (s.qkNorm ?? 'head') === 'head', window: 0, sinks: s.attentionSinks === true, ...over,
  };
}

/** RoPE of a shape on both sides: the CPU's tables over `positions`, the kernels' inverse frequencies and factor. */
function ropeOf(a: AttnShape, positions: number): { cos: Float32Array; sin: Float32Array; invFreq: Float32Array; mscale: number } {
  const s = { ...a.spec, headDim: a.hd, maxPositions: positions };
  const { invFreq, scale } = ropeFrequencies(s);
  return { ...ropeTablesFor(s), invFreq, mscale: scale };
}

/** The weights and parameters of a shape on the device: AttnParams' bytes and the CPU's float32 views. */
function paramsOf(dev: OpDevice, draw: Draw, a: AttnShape, invFreq: Float32Array, mscale: number) {
  const qn = a.headNorm ? draw.bf16(a.hd, 1) : undefined, kn = a.headNorm ? draw.bf16(a.hd, 1) : undefined;
  const sinks = a.sinks ? draw.bf16(a.nh, 2) : undefined;
  const eps = a.spec.rmsNormEps;
  const params = encodeAttn({
    qNorm: qn ? dev.upload(qn.bits, 'q_norm') : 0n, kNorm: kn ? dev.upload(kn.bits, 'k_norm') : 0n, invFreq: dev.upload(invFreq, 'inv_freq'),
    sinks: sinks ? dev.upload(sinks.bits, 'sinks') : 0n, eps, mscale, window: a.window,
  });
  return { params, qn: qn?.f32, kn: kn?.f32, sinks, eps };
}

/** A row's q and k heads normed (when the shape does) and rotated at `pos`, from its q | k | v row at x[off..), as the CPU computes them. */
function prologue(a: AttnShape, x: Float32Array, off: number, pos: number, r: { cos: Float32Array; sin: Float32Array }, qn?: Float32Array, kn?: Float32Array, eps = 1e-6): { q: Float32Array; k: Float32Array; v: Float32Array } {
  const { nh, nkv, hd } = a;
  const q = x.slice(off, off + nh * hd), k = x.slice(off + nh * hd, off + (nh + nkv) * hd), v = x.slice(off + (nh + nkv) * hd, off + (nh + 2 * nkv) * hd);
  for (const [m, heads, w] of [[q, nh, qn], [k, nkv, kn]] as const) {
    for (let h = 0; h < heads; h++) {
      if (w) rmsnorm(m, h * hd, m, h * hd, w, hd, eps);
      rope(m, h * hd, hd, r.cos, r.sin, pos);
    }
  }
  return { q, k, v };
}

/**
 * The rows' KV caches as one paged pool of T blocks of `bs` = max(cap) positions (row t: block t, [L][bs][2][KD]),
 * poisoned but for layer LAYER's positions [0, upTo[t]) holding `fill`'s values.
 */
function kvCaches(dev: OpDevice, a: AttnShape, cap: readonly number[], upTo: readonly number[], fill: (t: number, p: number) => { k: Float32Array; v: Float32Array }) {
  const KD = a.nkv * a.hd;
  const bs = Math.max(...cap);
  const rowFloats = LAYERS * bs * 2 * KD;
  const all = new Float32Array(upTo.length * rowFloats);
  new Uint32Array(all.buffer).fill(0xffffffff);
  const host = upTo.map((n, t) => {
    const c = all.subarray(t * rowFloats, (t + 1) * rowFloats);
    for (let p = 0; p < n; p++) {
      const { k, v } = fill(t, p);
      const at = (LAYER * bs + p) * 2 * KD;
      c.set(k, at);
      c.set(v, at + KD);
    }
    return Float32Array.from(c);
  });
  const pool = dev.guarded(all, 'kv pool');
  const devs = host.map((_, t) => pool + BigInt(4 * t * rowFloats));
  const kv = { pool, blockSize: bs, layers: LAYERS, tables: host.map((_, t) => [t]) };
  /** Row t's cache as the device left it, and its entry at position p of LAYER. */
  const read = (t: number): Float32Array => new Float32Array(dev.read(devs[t]!, 4 * rowFloats).buffer);
  const entry = (t: number, c: Float32Array, p: number): Float32Array => c.subarray((LAYER * bs + p) * 2 * KD, (LAYER * bs + p + 1) * 2 * KD);
  return { host, devs, KD, bs, kv, read, entry };
}

/** The cache words of a row that differ from `want`, outside position `pos` of LAYER (which the kernel writes). */
function changedElsewhere(got: Float32Array, want: Float32Array, cap: number, KD: number, pos: number): number {
  const g = new Uint32Array(got.buffer), w = new Uint32Array(want.buffer);
  const from = (LAYER * cap + pos) * 2 * KD, to = from + 2 * KD;
  let n = 0;
  for (let i = 0; i < w.length; i++) if ((i < from || i >= to) && g[i] !== w[i]) n++;
  return n;
}

export function qkNormWholeCases(dev: OpDevice, draw: Draw): void {
  const s = FAMILIES.olmoe.spec;
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = s;
  const QD = nh * hd, KD = nkv * hd, ld = QD + 2 * KD, T = 5;
  try {
    const x = draw.f32(T * ld, 3);
    const qn = draw.bf16(QD, 1), kn = draw.bf16(KD, 1);
    const qkv = dev.guarded(x, 'qkv');
    const l = qkNormWholeLaunch(T, { qkv, ld, qNorm: dev.upload(qn.bits, 'q_norm'), kNorm: dev.upload(kn.bits, 'k_norm'), QD, KD, eps: s.rmsNormEps });
    dev.run(l);
    const got = dev.readF32(qkv, T * ld);
    const want = new Float32Array(x);
    for (let t = 0; t < T; t++) {
      rmsnorm(want, t * ld, x, t * ld, qn.f32, QD, s.rmsNormEps);
      rmsnorm(want, t * ld + QD, x, t * ld + QD, kn.f32, KD, s.rmsNormEps);
    }
    const problems: string[] = [];
    for (let t = 0; t < T; t++) for (let i = QD + KD; i < ld; i++) if (got[t * ld + i] !== x[t * ld + i]) { problems.push('v changed'); t = T; break; }
    if (!dev.guardIntact(qkv, 4 * T * ld)) problems.push('wrote past q | k | v');
    record(l.name, `olmoe q ${QD} k ${KD} T${T}`, 'f32', normErr(got, want), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

export function qkRopeKvCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, mixtral, olmoe, gptOss, tiny } = FAMILIES;
  for (const a of [shapeOf('qwen3_moe', qwen3.spec), shapeOf('mixtral', mixtral.spec), shapeOf('olmoe', olmoe.spec, { headNorm: false }), shapeOf('gpt_oss yarn', gptOss.spec), shapeOf('tiny-moe', tiny.spec)]) {
    try {
      const T = 5, pos = [0, 1, 37, 300, 4095], cap = pos.map((p) => p + 3);
      const { nh, nkv, hd } = a, ld = (nh + 2 * nkv) * hd;
      const r = ropeOf(a, Math.max(...cap));
      const pr = paramsOf(dev, draw, a, r.invFreq, r.mscale);
      const x = draw.f32(T * ld, 3);
      const qkv = dev.guarded(x, 'qkv');
      const caches = kvCaches(dev, a, cap, pos.map(() => 0), () => ({ k: new Float32Array(0), v: new Float32Array(0) }));
      const step = uploadStep(dev, T, { valid: T, count: false, pos, kv: caches.kv });
      const l = qkRopeKvLaunch(T, { qkv, ld, rows: step.rows, params: pr.params, layer: LAYER, nh, nkv, hd });
      dev.run(l);
      const got = dev.readF32(qkv, T * ld);
      const gotAll: number[] = [], wantAll: number[] = [];
      const problems: string[] = [];
      for (let t = 0; t < T; t++) {
        const w = prologue(a, x, t * ld, pos[t]!, r, pr.qn, pr.kn, pr.eps);
        const want = [...w.q, ...w.k];
        wantAll.push(...want, ...w.k, ...w.v);
        gotAll.push(...got.subarray(t * ld, t * ld + (nh + nkv) * hd));
        const c = caches.read(t);
        gotAll.push(...caches.entry(t, c, pos[t]!));
        if (changedElsewhere(c, caches.host[t]!, caches.bs, caches.KD, pos[t]!) > 0) problems.push(`row ${t}: cache written outside its position`);
        for (let i = (nh + nkv) * hd; i < ld; i++) if (got[t * ld + i] !== x[t * ld + i]) { problems.push(`row ${t}: v changed`); break; }
      }
      record(l.name, `${a.label} nh${nh} nkv${nkv} hd${hd} T${T} pos ${pos.join('/')}`, 'f32', normErr(gotAll, wantAll), BAR.f32, problems);
    } finally {
      dev.release();
    }
  }
}

/**
 * Attention of T rows (distinct sequences at `pos`) in S splits: decode rows (`fused`: their q and k normed and
 * rotated, k and v written to the cache by the kernel) or prefill rows (q as given, the cache holding the row's own
 * position already), merged when S > 1.
 */
function runAttend(dev: OpDevice, draw: Draw, a: AttnShape, fused: boolean, S: number, pos: readonly number[]): void {
  const T = pos.length, { nh, nkv, hd } = a, ld = (nh + 2 * nkv) * hd, QD = nh * hd;
  const cap = pos.map((p) => p + 8);
  try {
    const r = ropeOf(a, Math.max(...cap));
    const pr = paramsOf(dev, draw, a, r.invFreq, r.mscale);
    const x = draw.f32(T * ld, 2);
    const KD = nkv * hd;
    // Cached keys and values of the positions before (and, for prefill rows, at) each row's.
    const keys = pos.map((p) => draw.f32((p + 1) * KD, 2)), values = pos.map((p) => draw.f32((p + 1) * KD, 1));
    const caches = kvCaches(dev, a, cap, pos.map((p) => (fused ? p : p + 1)), (t, p) => ({ k: keys[t]!.subarray(p * KD, (p + 1) * KD), v: values[t]!.subarray(p * KD, (p + 1) * KD) }));
    const step = uploadStep(dev, T, { valid: T, count: false, pos, kv: caches.kv });
    const att = dev.poisoned(4 * T * QD, 'att');
    const part = S > 1 ? dev.poisoned(4 * T * nh * S * (hd + 2), 'attnPart') : dev.alloc(16, 'attnPart');
    const sinksDev = pr.sinks ? dev.upload(pr.sinks.bits, 'sinks') : 0n;
    const l = attendLaunch(fused, T, S, { qkv: dev.upload(x, 'qkv'), ld, rows: step.rows, params: pr.params, layer: LAYER, nh, nkv, hd, att, part });
    dev.run(l);
    let kernel = l.name;
    if (S > 1) {
      const m = attendMergeLaunch(T, { part, att, nh, hd, S, sinks: sinksDev });
      dev.run(m);
      kernel += `+${m.name}`;
    }
    const got = dev.readF32(att, T * QD);
    const want = new Float32Array(T * QD);
    const problems: string[] = [];
    const layout: HeadLayout = { qkDim: hd, vDim: hd, kStride: KD, vStride: KD, scale: 1 / Math.sqrt(hd), window: a.window };
    const scores = new Float64Array(Math.max(...cap)), acc = new Float64Array(hd);
    const cacheGot: number[] = [], cacheWant: number[] = [];
    for (let t = 0; t < T; t++) {
      let q = x.subarray(t * ld, t * ld + QD);
      if (fused) {
        // The row's own k and v, normed and rotated, join its cache (and must land there).
        const w = prologue(a, x, t * ld, pos[t]!, r, pr.qn, pr.kn, pr.eps);
        q = w.q;
        keys[t]!.set(w.k, pos[t]! * KD);
        values[t]!.set(w.v, pos[t]! * KD);
        const c = caches.read(t);
        cacheGot.push(...caches.entry(t, c, pos[t]!));
        cacheWant.push(...w.k, ...w.v);
        if (changedElsewhere(c, caches.host[t]!, caches.bs, KD, pos[t]!) > 0) problems.push(`row ${t}: cache written outside its position`);
      }
      for (let h = 0; h < nh; h++) {
        const kv = Math.floor(h / (nh / nkv)) * hd;
        attendHead(want, t * QD + h * hd, q, h * hd, keys[t]!, kv, values[t]!, kv, WHOLE, 0, WHOLE_BLOCK, pos[t]!, layout, pr.sinks?.f32[h], scores, acc);
      }
    }
    if (fused) {
      const ce = normErr(cacheGot, cacheWant);
      if (!(ce <= BAR.f32)) problems.push(`KV cache write error ${ce}`);
    }
    if (nonFinite(got) > 0) problems.push(`${nonFinite(got)} of ${T * QD} outputs not written (or not finite)`);
    if (!dev.guardIntact(att, 4 * T * QD)) problems.push('wrote past att');
    const extras = [a.sinks ? 'sinks' : '', a.window ? `window ${a.window}` : '', a.headNorm && fused ? 'q/k norm' : ''].filter(Boolean).join(' ');
    record(kernel, `${a.label} nh${nh} nkv${nkv} hd${hd} T${T} S${S} pos ${pos.join('/')}${extras ? ` ${extras}` : ''}`, 'f32', normErr(got, want), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

export function attendCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, mixtral, olmoe, gptOss, tiny } = FAMILIES;
  const g = gptOss.spec;
  dev.raise(qwen3.spec, routeModeOf(qwen3.spec));
  // The families' own layers: prefill rows in one split, decode rows split 4 ways (a first position among them:
  // splits with nothing to read); gpt-oss's sliding layer (128 positions) and full layer, both with sinks.
  const fams = [
    shapeOf('qwen3_moe', qwen3.spec), shapeOf('mixtral', mixtral.spec), shapeOf('olmoe', olmoe.spec, { headNorm: false }),
    shapeOf('gpt_oss sliding', g, { window: g.slidingWindows![0]! }), shapeOf('gpt_oss full', g), shapeOf('tiny-moe', tiny.spec),
  ];
  for (const a of fams) {
    runAttend(dev, draw, a, false, 1, [0, 37, 300]);
    runAttend(dev, draw, a, true, 4, [0, 37, 300]);
  }
  runAttend(dev, draw, fams[3]!, true, 1, [5, 129, 200]);
  runAttend(dev, draw, fams[4]!, false, 2, [3, 64, 250]);
  // Every head dim and query-heads-a-kv-head the kernels are built for (2 kv heads), both kinds, split and not.
  for (const hd of [32, 64, 128] as const) {
    for (const G of [1, 2, 4, 8, 16]) {
      const a = shapeOf(`hd${hd} G${G}`, qwen3.spec, { nh: 2 * G, nkv: 2, hd });
      runAttend(dev, draw, a, false, G % 2 ? 1 : 2, [9, 70]);
      runAttend(dev, draw, a, true, G >= 8 ? 1 : 3, [0, 140]);
    }
  }
}
