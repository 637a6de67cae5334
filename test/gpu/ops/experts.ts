// The expert products, grouped as the routing groups a step's picks, reading the expert banks as the backend builds
// them: each family's experts drawn as its checkpoint stores them, laid out by the backend's row layout, uploaded by
// its uploader into a hot bank (device) and a cold bank (mapped host memory, read in place), the slot table the
// routing reads. The CPU side reads the same tensors with the CPU's readers (bf16, block FP8, gpt-oss's MXFP4).
// Per family: gate | up (SwiGLU; gpt-oss clamped, interleaved, biased) and down at every decode bucket (gemv), the
// tensor-core tiles of a 100-row prefill (groups past 64 rows: two tiles), and batch 1's combining down product.
import { CudaExpertBanks } from '../../../src/backend/cuda/banks/banks.ts';
import { expertRowLayout, type ExpertRowLayout } from '../../../src/backend/cuda/weights/device-weights.ts';
import { TensorUploader } from '../../../src/backend/cuda/weights/uploader.ts';
import { padExpertsForKernels } from '../../../src/backend/cuda/weights/pad-experts.ts';
import { maxGroupedTiles, type GemmArgs } from '../../../src/backend/cuda/step/kernel-args.ts';
import { combineLaunch, gemmTcLaunch, gemvLaunch, type GemvRows, type Launch } from '../../../src/backend/cuda/step/launches.ts';
import { gridArgs } from '../../../src/backend/cuda/step/step-kernels.ts';
import { combineRowsPerWarp, gemvRowsPerWarp } from '../../../src/backend/cuda/step/plan.ts';
import { routeModeOf } from '../../../src/backend/cuda/step/kernel-args.ts';
import { moeTensorNames } from '../../../src/model/architecture.ts';
import { gptOssNames } from '../../../src/model/families/gpt-oss.ts';
import { fp8ScaleName, fp8Scales, mxfp4Matrix } from '../../../src/model/quant-read.ts';
import { bf16Matrix, quantRows, type QuantMatrix } from '../../../src/model/quant.ts';
import type { QuantExpert } from '../../../src/backend/cpu/quant-linear.ts';
import { tensorToFloat32 } from '../../../src/model/float-convert.ts';
import { mapTensorSource } from '../../../src/model/tensor-source.ts';
import { moeLayerIds, type ModelSpec } from '../../../src/model/spec.ts';
import type { RawTensor } from '../../../src/model/weights.ts';
import type { OpDevice } from './device.ts';
import type { Draw } from './draw.ts';
import type { Family } from './shapes.ts';
import { groupsOf, uploadGroups } from './groups.ts';
import { endingRef, FORMAT_NAME, sampleCount, samplePositions, type Ending } from './products.ts';
import { BAR, nonFinite, normErr, record } from './report.ts';
import { FP8_BLOCK, matrixDot } from './weights.ts';

/** One expert as the CPU reads it (the CPU backend's QuantExpert: gpt-oss's gate | up split into its gate and up rows). */
interface CpuExpert {
  readonly q: QuantExpert;
  /** gpt-oss: gate | up's biases by weight row (interleaved). */
  readonly gateUpBias?: Float32Array;
}

/**
 * Weight row r of the kernels' gate | up (Ip units: gate rows then up rows, or interleaved 2j, 2j + 1) . x[off..): the
 * CPU expert's gate or up row, 0 for the zero units a padded expert gains.
 */
function gateUpDot(e: CpuExpert, r: number, Ip: number, interleaved: boolean, x: Float32Array, off: number): number {
  const up = interleaved ? r % 2 === 1 : r >= Ip;
  const j = interleaved ? r >> 1 : up ? r - Ip : r;
  const m = up ? e.q.up : e.q.gate;
  return j < m.rows ? matrixDot(m as QuantMatrix, j, x, off) : 0;
}

/** A family's pool of experts in banks on the device. */
interface Pool {
  readonly fam: Family;
  /** The spec the kernels compute (a padded expert width for tiny-moe). */
  readonly kspec: ModelSpec;
  readonly row: ExpertRowLayout;
  readonly banks: CudaExpertBanks;
  /** Physical slot of each pool expert, as the device's slot table holds it. */
  readonly slots: Int32Array;
  readonly cpu: CpuExpert[];
  readonly hot: number;
}

const bits16 = (b: Uint8Array): Uint16Array => new Uint16Array(b.buffer, b.byteOffset, b.byteLength >> 1);

/** A pool of P experts of one MoE layer of `fam`, the first ceil(P / 2) hot, the rest cold. */
function buildPool(dev: OpDevice, draw: Draw, fam: Family, P: number): Pool {
  const s = fam.spec;
  const l0 = moeLayerIds(s)[0]!;
  // One MoE layer of P experts: the banks and the row layout read the tensors of its layer.
  const spec: ModelSpec = { ...s, numExperts: P, numLayers: l0 + 1, ...(s.moeLayers ? { moeLayers: [l0] } : {}) };
  const { hiddenSize: H, expertIntermediate: I } = spec;
  const raw = new Map<string, RawTensor>();
  const put = (name: string, dtype: RawTensor['dtype'], shape: number[], bytes: Uint8Array): RawTensor => {
    const t = { name, dtype, shape, bytes };
    raw.set(name, t);
    return t;
  };
  const cpu: CpuExpert[] = [];
  if (s.architecture === 'gpt_oss') {
    const n = gptOssNames(l0);
    const gub = put(n.gateUpBlocks, 'U8', [P, 2 * I, H / 32, 16], draw.bytes(P * 2 * I * H / 2, 'fp4'));
    const gus = put(n.gateUpScales, 'U8', [P, 2 * I, H / 32], draw.e8m0(P * 2 * I * H / 32));
    const gubias = put(n.gateUpBias, 'BF16', [P, 2 * I], new Uint8Array(draw.bf16(P * 2 * I, 0.5).bits.buffer));
    const db = put(n.downBlocks, 'U8', [P, H, I / 32, 16], draw.bytes(P * H * I / 2, 'fp4'));
    const ds = put(n.downScales, 'U8', [P, H, I / 32], draw.e8m0(P * H * I / 32));
    const dbias = put(n.downBias, 'BF16', [P, H], new Uint8Array(draw.bf16(P * H, 0.5).bits.buffer));
    const gb = tensorToFloat32(gubias), dbf = tensorToFloat32(dbias);
    // As the CPU's gpt-oss loader reads an expert: gate_up's even rows the gate, odd rows up (transformers' ::2, 1::2).
    const gateRows = Array.from({ length: I }, (_, j) => 2 * j), upRows = gateRows.map((r) => r + 1);
    for (let e = 0; e < P; e++) {
      const gu = mxfp4Matrix(gub, gus, e, 2 * I, H);
      const bias = gb.subarray(e * 2 * I, (e + 1) * 2 * I);
      cpu.push({
        q: {
          gate: quantRows(gu, gateRows), up: quantRows(gu, upRows), down: mxfp4Matrix(db, ds, e, H, I),
          gateBias: Float32Array.from(gateRows, (r) => bias[r]!), upBias: Float32Array.from(upRows, (r) => bias[r]!), downBias: dbf.slice(e * H, (e + 1) * H),
        },
        gateUpBias: bias,
      });
    }
  } else {
    const fp8 = s.quantization?.method === 'fp8';
    const matrix = (name: string, rows: number, cols: number): QuantMatrix => {
      if (!fp8) return bf16Matrix(rows, cols, bits16(put(name, 'BF16', [rows, cols], draw.bytes(2 * rows * cols, 'bf16')).bytes));
      const w = put(name, 'F8_E4M3', [rows, cols], draw.bytes(rows * cols, 'fp8'));
      const sShape = [Math.ceil(rows / FP8_BLOCK[0]), Math.ceil(cols / FP8_BLOCK[1])];
      const sc = put(fp8ScaleName(name), 'F32', sShape, new Uint8Array(draw.fp8Scales(sShape[0]! * sShape[1]!).buffer));
      return { format: 'fp8', rows, cols, data: w.bytes, scales: fp8Scales(sc, cols, FP8_BLOCK), block: FP8_BLOCK };
    };
    for (let e = 0; e < P; e++) {
      const n = moeTensorNames(spec, l0).expert(e);
      cpu.push({ q: { gate: matrix(n.gate, I, H), up: matrix(n.up, I, H), down: matrix(n.down, H, I) } });
    }
  }
  const padded = padExpertsForKernels(spec, mapTensorSource(raw, spec.quantization));
  const row = expertRowLayout(padded.source, padded.spec);
  const hot = Math.ceil(P / 2);
  const banks = dev.keep(() => {
    const checks = { bf16: dev.fns.get('op_check_finite_bf16')!, fp8: dev.fns.get('op_check_finite_fp8')! };
    const uploader = new TensorUploader(dev.d, padded.source, checks, { stagingBytes: 16 << 20 });
    const b = new CudaExpertBanks(dev.d, padded.spec, uploader, row, dev.stream, { placement: { hotPerLayer: hot } });
    dev.hold(() => b.dispose());
    uploader.finish(); // the banks' bytes checked finite on the device, as at a load
    return b;
  });
  const slots = new Int32Array(dev.read(banks.slotTableDev, 4 * P).buffer);
  return { fam, kspec: padded.spec, row, banks, slots, cpu, hot };
}

/** What a grouped product's GemmProblem reads of the pool: its banks and their rows. */
function bankArgs(p: Pool): Pick<GemmArgs, 'hot' | 'cold' | 'hotRows' | 'rowBytes'> {
  return { hot: p.banks.hotDev[0]!, cold: p.banks.coldDev[0]!, hotRows: p.banks.hotRowsAllocated, rowBytes: p.banks.rowBytes };
}

/** Each of T rows picks K distinct experts of the pool (as a router does: an expert at most once a row). */
function drawPicks(draw: Draw, T: number, K: number, P: number): Int32Array {
  const picks = new Int32Array(T * K);
  for (let t = 0; t < T; t++) picks.set(draw.distinct(K, P), t * K);
  return picks;
}

/** The CPU's unit j of expert e on x[off..): SwiGLU of its gate and up sums (gpt-oss: clamped, with their biases). */
function unitRef(p: Pool, e: CpuExpert, j: number, x: Float32Array, off: number): number {
  const Ip = p.kspec.expertIntermediate, act = p.kspec.expertAct;
  const end: Ending = { epi: 'swiglu', interleaved: p.row.interleaved, ...(act ? { clamped: act } : {}), ...(e.gateUpBias ? { bias: { bits: new Uint16Array(0), f32: e.gateUpBias } } : {}) };
  return endingRef(end, j, Ip, (r) => Math.fround(gateUpDot(e, r, Ip, p.row.interleaved, x, off)));
}

/** The CPU's output o of expert e's down product on act[off..) (its bias added to the float32 sum, gpt-oss). */
function downRef(e: CpuExpert, o: number, act: Float32Array, off: number): number {
  return Math.fround(Math.fround(matrixDot(e.q.down as QuantMatrix, o, act, off)) + (e.q.downBias?.[o] ?? 0));
}

type Which = 'gate_up' | 'down';

/**
 * One grouped product of T rows' picks: gate | up (SwiGLU into act [T * K][I]) or down (act -> partial [T * K][H]),
 * `launchOf` building the gemv or tensor-core launch.
 */
function runGrouped(dev: OpDevice, draw: Draw, p: Pool, which: Which, T: number, launchOf: (a: GemmArgs, groups: number) => Launch): { kernel: string; err: number; problems: string[]; O: number; Kin: number } {
  const s = p.kspec, { hiddenSize: H, expertIntermediate: I, topK: K } = s, E = p.fam.spec.numExperts;
  const row = p.row;
  try {
    const picks = drawPicks(draw, T, K, p.cpu.length);
    const g = groupsOf(picks, T, K, (e) => p.slots[e]!);
    const ga = uploadGroups(dev, g, T, K, E);
    const gu = which === 'gate_up';
    const O = gu ? I : H, Kin = gu ? H : I, inRows = gu ? T : T * K;
    const x = draw.f32(inRows * Kin);
    const yDev = dev.poisoned(4 * T * K * O, 'y');
    const act = s.expertAct;
    const a: GemmArgs = {
      grpN: ga.n, grpSlot: ga.slot, grpStart: ga.start, grpRows: ga.rows, tileN: ga.tileN, tileGroup: ga.tileGroup, tileRow0: ga.tileRow0, ...bankArgs(p),
      x: dev.upload(x, 'x'), y: yDev, ldx: Kin, ldy: O, O, K: Kin, xDiv: gu ? K : 1,
      ...(gu
        ? { wOff: row.gateUpAt, sOff: row.gateUpGridAt, ...gridArgs(row.gateUp), bOff: row.gateUpBiasAt, guInterleave: row.interleaved, ...(act ? { limit: act.limit, alpha: act.alpha } : {}) }
        : { wOff: row.downAt, sOff: row.downGridAt, ...gridArgs(row.down), bOff: row.downBiasAt }),
    };
    const l = launchOf(a, Math.min(T * K, E));
    dev.run(l);
    const y = new Float32Array(dev.read(yDev, 4 * T * K * O).buffer);
    const problems: string[] = [];
    const unwritten = nonFinite(y);
    if (unwritten > 0) problems.push(`${unwritten} of ${T * K * O} outputs not written (or not finite)`);
    if (!dev.guardIntact(yDev, 4 * T * K * O)) problems.push('wrote past its outputs');
    const at = samplePositions(draw, T * K * O, sampleCount(T * K * O, Kin, gu ? 'swiglu' : 'store'));
    const ref = at.map((i) => {
      const pick = Math.floor(i / O), f = i % O, e = p.cpu[picks[pick]!]!;
      if (gu) return unitRef(p, e, f, x, Math.floor(pick / K) * Kin);
      return downRef(e, f, x, pick * Kin);
    });
    return { kernel: l.name, err: normErr(at.map((i) => y[i]!), ref), problems, O, Kin };
  } finally {
    dev.release();
  }
}

/** Batch 1's down product adding its K picks (a warp each, R features of every pick a block) to the residual. */
function runCombine(dev: OpDevice, draw: Draw, p: Pool, R: 1 | 2 | 4): { kernel: string; err: number; problems: string[] } {
  const s = p.kspec, { hiddenSize: H, expertIntermediate: I, topK: K } = s, row = p.row, format = row.format;
  try {
    const picks = drawPicks(draw, 1, K, p.cpu.length);
    const w = draw.f32(K).map((v) => Math.abs(v) + 0.05);
    const act = draw.f32(K * I);
    const res = draw.f32(H);
    const yDev = dev.poisoned(4 * H, 'hidden');
    const a: GemmArgs = {
      ...bankArgs(p), grpSlot: dev.upload(Int32Array.from(picks, (e) => p.slots[e]!), 'pickSlot'), pickW: dev.upload(w, 'pickW'),
      x: dev.upload(act, 'act'), y: yDev, res: dev.upload(res, 'res'), ldx: I, ldy: H, O: H, K: I, xDiv: 1, rows: K,
      wOff: row.downAt, sOff: row.downGridAt, ...gridArgs(row.down), bOff: row.downBiasAt, early: true, l2: 1,
    };
    const l = combineLaunch(format, R, K, a);
    dev.run(l);
    const y = new Float32Array(dev.read(yDev, 4 * H).buffer);
    const problems: string[] = [];
    if (nonFinite(y) > 0) problems.push(`${nonFinite(y)} of ${H} outputs not written (or not finite)`);
    if (!dev.guardIntact(yDev, 4 * H)) problems.push('wrote past its outputs');
    const at = samplePositions(draw, H, sampleCount(H, I * K, 'store'));
    // The CPU's combine (moe-ops combinePicks: float64 sum of float32 products in router order) onto the residual.
    const ref = at.map((f) => {
      let acc = 0;
      for (let k = 0; k < K; k++) {
        acc += Math.fround(w[k]! * downRef(p.cpu[picks[k]!]!, f, act, k * I));
      }
      return Math.fround(res[f]! + Math.fround(acc));
    });
    return { kernel: l.name, err: normErr(at.map((f) => y[f]!), ref), problems };
  } finally {
    dev.release();
  }
}

/** Every expert product of one family (a pool of P experts). `allR`: the combine at each R, else the backend's. */
export function expertCases(dev: OpDevice, draw: Draw, fam: Family, P: number, allR: boolean): void {
  const spec = fam.spec;
  dev.raise(spec, routeModeOf(spec));
  const p = buildPool(dev, draw, fam, P);
  try {
    const { topK: K, numExperts: E } = spec;
    const format = p.row.format;
    const dtype = FORMAT_NAME[format];
    const shape = (which: Which, O: number, Kin: number, rows: string): string =>
      `${fam.name} experts ${which} O${O} K${Kin} ${rows} (${p.hot} hot + ${p.cpu.length - p.hot} cold of ${P})`;
    for (const which of ['gate_up', 'down'] as const) {
      const epi = which === 'gate_up' ? 'swiglu' : 'store';
      const O = which === 'gate_up' ? p.kspec.expertIntermediate : spec.hiddenSize;
      for (const B of [1, 2, 4, 8, 16] as const) {
        // The backend's R for this many groups, and at batch 4 the other one too.
        const mine = gemvRowsPerWarp(O, Math.min(B * K, E), dev.smCount);
        for (const R of B === 4 ? ([1, 2] as const) : [mine]) {
          const r = runGrouped(dev, draw, p, which, B, (a, groups) => gemvLaunch(format, B as GemvRows, R, epi, groups, which === 'down' ? { ...a, early: true, l2: 1 } : { ...a, l2: 1 }));
          record(r.kernel, shape(which, r.O, r.Kin, `B${B} R${R}`), dtype, r.err, BAR.gemv, r.problems);
        }
      }
      const T = 100;
      const r = runGrouped(dev, draw, p, which, T, (a) => gemmTcLaunch(format, epi, maxGroupedTiles(T * K, E), a));
      record(r.kernel, shape(which, r.O, r.Kin, `T${T}`), dtype, r.err, BAR.tc, r.problems);
    }
    const H = spec.hiddenSize;
    const Rs = allR ? ([1, 2, 4] as const) : [format === 'bf16' ? combineRowsPerWarp(H, dev.smCount) : gemvRowsPerWarp(H, K, dev.smCount)];
    if (K <= 8) {
      for (const R of Rs) {
        const r = runCombine(dev, draw, p, R);
        record(r.kernel, `${fam.name} experts down+combine O${H} K${p.kspec.expertIntermediate} B1 ${K} picks R${R}`, dtype, r.err, BAR.gemv, r.problems);
      }
    }
  } finally {
    dev.releaseKept();
  }
}
