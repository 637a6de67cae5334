// How the CUDA backend holds weights on the device: as stored (bf16 values, block FP8: e4m3 bytes plus a
// float32 scale grid, fp8-grid.ts, or MXFP4 experts: E2M1 bytes plus E8M0 scale bytes), a product's stacked
// matrices (q | k | v, gate | up) contiguous. The one
// description of a product's bytes, used to plan memory, to lay out an expert's bank row, and to upload.
import { ResidencyError } from '../../../errors.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import type { TensorSource } from '../../../model/tensor-source.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames, moeTensorNames } from '../../../model/architecture.ts';
import { fp8ScaleName, fp8Scales } from '../../../model/quant-read.ts';
import type { DType } from '../../../model/weights.ts';
import { fillFp8Grid, fp8Grid, type Fp8Grid } from './fp8-grid.ts';
import { gptOssNames } from '../../../model/families/gpt-oss.ts';
import { deepseekV3Names } from '../../../model/families/deepseek-v3.ts';
import { moeLayerIds } from '../../../model/spec.ts';

export type WeightFormat = 'bf16' | 'fp8' | 'mxfp4';

/** One product's weights: matrices `names` ([partRows[i]][cols] each) stacked by rows. */
export interface ProductWeights {
  readonly format: WeightFormat;
  readonly names: readonly string[];
  readonly partRows: readonly number[];
  readonly cols: number;
  /** Stored bytes of the values (bf16: 2 a value, fp8: 1, mxfp4: 1/2). */
  readonly dataBytes: number;
  /** fp8: the scale grid the kernels read; mxfp4: its scale bytes (sLd a row, one per 32 values). */
  readonly grid?: Fp8Grid;
  /** fp8: the checkpoint's [br, bc] blocks. */
  readonly block?: readonly [number, number];
}

const DTYPE: Record<string, WeightFormat> = { BF16: 'bf16', F8_E4M3: 'fp8' };

/**
 * The product stacking `names` (each [partRows[i]][cols], as stored in `source`). Every matrix must be in
 * the same format: bf16, or block FP8 with scale blocks whose columns are a multiple of 32 (the kernels'
 * slices of K).
 */
export function productWeights(source: TensorSource, spec: ModelSpec, names: readonly string[], partRows: readonly number[], cols: number): ProductWeights {
  let format: WeightFormat | undefined;
  names.forEach((name, i) => {
    const t = source.info(name);
    const f = DTYPE[t.dtype];
    if (f === undefined) throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend keeps weights as stored, bf16 or block FP8: tensor ${name} is ${t.dtype}; use --backend cpu`);
    if (format !== undefined && f !== format) {
      throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: tensor ${name} is ${t.dtype} but ${names[0]}, computed in the same product, is not; use --backend cpu`);
    }
    format = f;
    if (t.shape.length !== 2 || t.shape[0] !== partRows[i] || t.shape[1] !== cols) {
      throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} has shape [${t.shape.join(', ')}]: expected [${partRows[i]}, ${cols}]`);
    }
  });
  const rows = partRows.reduce((a, b) => a + b, 0);
  if (format === 'bf16') return { format, names, partRows, cols, dataBytes: 2 * rows * cols };
  const q = spec.quantization;
  if (q?.method !== 'fp8') throw new ResidencyError('BAD_CHECKPOINT', `tensor ${names[0]} is F8_E4M3 but config.json has no fp8 quantization_config`);
  const block = q.blockSize;
  if (block[1] % 32 !== 0) {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: FP8 blocks of [${block.join(', ')}] (quantization_config.weight_block_size): the kernels take block columns that are a multiple of 32; use --backend cpu`);
  }
  return { format: 'fp8', names, partRows, cols, dataBytes: rows * cols, grid: fp8Grid(partRows, cols, block), block };
}

/** Device bytes of a product: its values, and its scale grid 16-byte aligned after them. */
export function productBytes(p: ProductWeights): number {
  return p.grid ? align16(p.dataBytes) + p.grid.bytes : p.dataBytes;
}

export const align16 = (n: number): number => Math.ceil(n / 16) * 16;

/** The product's scale grid from its matrices' stored scales, each validated (BAD_CHECKPOINT naming the tensor). */
export function readGrid(source: TensorSource, p: ProductWeights): Float32Array {
  if (!p.grid || !p.block) throw new ResidencyError('INTERNAL', `readGrid: ${p.names[0]} is not block FP8`);
  const parts = p.names.map((name) => {
    const sName = fp8ScaleName(name);
    const t = source.info(sName);
    const bytes = new Uint8Array(t.bytes);
    source.read(sName, bytes);
    return fp8Scales({ name: sName, dtype: t.dtype as DType, shape: t.shape, bytes }, p.cols, p.block!);
  });
  return fillFp8Grid(p.grid, p.partRows, p.block[0], parts);
}

/**
 * An expert's bank row: gate | up values, down values, then (fp8) the gate | up grid and the down grid, or
 * (mxfp4) their scale bytes, then (gpt-oss) the gate | up and down biases, bf16.
 */
export interface ExpertRowLayout {
  readonly format: WeightFormat;
  readonly bytes: number;
  readonly gateUp: ProductWeights;
  readonly down: ProductWeights;
  /** Byte offsets in the row (biases: -1 when none). */
  readonly gateUpAt: number;
  readonly downAt: number;
  readonly gateUpGridAt: number;
  readonly downGridAt: number;
  readonly gateUpBiasAt: number;
  readonly downBiasAt: number;
  /** Gate unit j is gate | up row 2j and up unit j row 2j + 1 (gpt-oss's gate_up_proj), else rows j and I + j. */
  readonly interleaved: boolean;
  /** Layer l's expert e's row as slices of the layer's stacked tensors (gpt-oss); absent: from the expert's own tensors. */
  readonly slices?: (l: number, e: number) => ExpertSlice[];
}

/** The MXFP4 scale bytes of a [rows][cols] matrix, in the grid's terms (a scale row per weight row). */
function mxfp4Grid(rows: number, cols: number): Fp8Grid {
  return { sRows: 1, sCols: 32, sLd: cols / 32, rows, bytes: rows * (cols / 32) };
}

/** The bank row of every routed expert, from the first MoE layer's expert 0 as stored (the uploads check every other). */
export function expertRowLayout(source: TensorSource, spec: ModelSpec): ExpertRowLayout {
  const { hiddenSize: H, expertIntermediate: I } = spec;
  if (spec.architecture === 'gpt_oss') return gptOssRowLayout(source, spec);
  const n = moeTensorNames(spec, moeLayerIds(spec)[0]!).expert(0);
  const gateUp = productWeights(source, spec, [n.gate, n.up], [I, I], H);
  const down = productWeights(source, spec, [n.down], [H], I);
  if (gateUp.format !== down.format) throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: ${n.down} and ${n.gate} are stored in different formats; use --backend cpu`);
  const dataEnd = gateUp.dataBytes + down.dataBytes;
  const none = { gateUpBiasAt: -1, downBiasAt: -1, interleaved: false };
  if (gateUp.format === 'bf16') return { format: 'bf16', bytes: dataEnd, gateUp, down, gateUpAt: 0, downAt: gateUp.dataBytes, gateUpGridAt: 0, downGridAt: 0, ...none };
  const gateUpGridAt = align16(dataEnd);
  const downGridAt = gateUpGridAt + gateUp.grid!.bytes;
  return { format: 'fp8', bytes: align16(downGridAt + down.grid!.bytes), gateUp, down, gateUpAt: 0, downAt: gateUp.dataBytes, gateUpGridAt, downGridAt, ...none };
}

/**
 * gpt-oss: each layer stacks its experts in six tensors (gate_up and down MXFP4 blocks and scales, and their
 * biases); an expert's row holds its slice of each, as stored: gate | up blocks [2I][H/2] (rows interleaved),
 * down blocks [H][I/2], their scales, their biases.
 */
function gptOssRowLayout(source: TensorSource, spec: ModelSpec): ExpertRowLayout {
  const { hiddenSize: H, expertIntermediate: I, numExperts: E } = spec;
  const n = gptOssNames(0);
  const want = (name: string, dtype: 'U8' | 'BF16', shape: readonly number[]): void => {
    const t = source.info(name);
    checkStackedDtype(name, t.dtype, dtype);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} is ${t.dtype} [${t.shape.join(', ')}]: expected ${dtype} [${shape.join(', ')}]`);
    }
  };
  want(n.gateUpBlocks, 'U8', [E, 2 * I, H / 32, 16]);
  want(n.gateUpScales, 'U8', [E, 2 * I, H / 32]);
  want(n.gateUpBias, 'BF16', [E, 2 * I]);
  want(n.downBlocks, 'U8', [E, H, I / 32, 16]);
  want(n.downScales, 'U8', [E, H, I / 32]);
  want(n.downBias, 'BF16', [E, H]);
  const gateUp: ProductWeights = { format: 'mxfp4', names: [n.gateUpBlocks], partRows: [2 * I], cols: H, dataBytes: I * H, grid: mxfp4Grid(2 * I, H) };
  const down: ProductWeights = { format: 'mxfp4', names: [n.downBlocks], partRows: [H], cols: I, dataBytes: (H * I) / 2, grid: mxfp4Grid(H, I) };
  const downAt = align16(gateUp.dataBytes);
  const gateUpGridAt = align16(downAt + down.dataBytes);
  const downGridAt = align16(gateUpGridAt + gateUp.grid!.bytes);
  const gateUpBiasAt = align16(downGridAt + down.grid!.bytes);
  const downBiasAt = align16(gateUpBiasAt + 2 * 2 * I);
  const slices = (l: number, e: number): ExpertSlice[] => {
    const m = gptOssNames(l);
    const slice = (name: string, bytes: number, at: number, check: ExpertSlice['check']): ExpertSlice => ({ name, offset: e * bytes, bytes, at, check });
    return [
      slice(m.gateUpBlocks, gateUp.dataBytes, 0, 'none'),
      slice(m.downBlocks, down.dataBytes, downAt, 'none'),
      slice(m.gateUpScales, gateUp.grid!.bytes, gateUpGridAt, 'e8m0'),
      slice(m.downScales, down.grid!.bytes, downGridAt, 'e8m0'),
      slice(m.gateUpBias, 2 * 2 * I, gateUpBiasAt, 'bf16'),
      slice(m.downBias, 2 * H, downBiasAt, 'bf16'),
    ];
  };
  return { format: 'mxfp4', bytes: align16(downBiasAt + 2 * H), gateUp, down, gateUpAt: 0, downAt, gateUpGridAt, downGridAt, gateUpBiasAt, downBiasAt, interleaved: true, slices };
}

/**
 * A stacked expert tensor (gpt-oss) stored as the bank row keeps it: blocks and scales U8 (checked at load,
 * so another dtype is corrupt), biases bf16 (others are valid, just not kept so on CUDA).
 */
export function checkStackedDtype(name: string, dtype: string, want: 'U8' | 'BF16'): void {
  if (dtype === want) return;
  if (want === 'BF16') throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend keeps gpt-oss's biases as stored bf16: tensor ${name} is ${dtype}; use --backend cpu`);
  throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} is ${dtype}: expected ${want}`);
}

/** One piece of an expert's bank row read straight from a stacked tensor (gpt-oss): bytes [offset, offset + bytes) of `name` at `at`. */
export interface ExpertSlice {
  readonly name: string;
  readonly offset: number;
  readonly bytes: number;
  readonly at: number;
  /** How its values are checked as they land: bf16 finite, E8M0 scales (at most 252), or none (E2M1: every code is a number). */
  readonly check: 'bf16' | 'e8m0' | 'none';
}

/** A layer's bf16 tensors beyond the common ones that stay on the device (gpt-oss: attention biases, sinks, router bias). */
export function layerExtras(spec: ModelSpec, l: number): { qkvBias: string[]; oBias?: string; sinks?: string; routerBias?: string } {
  if (spec.architecture !== 'gpt_oss') return { qkvBias: [] };
  const n = gptOssNames(l);
  return {
    qkvBias: spec.attentionBias ? [n.qBias, n.kBias, n.vBias] : [],
    ...(spec.attentionBias ? { oBias: n.oBias } : {}),
    sinks: n.sinks,
    routerBias: n.routerBias,
  };
}

/** Product `p` with an expert's tensor names `n` (same shapes and format as the layout's). */
export function expertProduct(p: ProductWeights, n: { readonly gate: string; readonly up: string; readonly down: string }, which: 'gateUp' | 'down'): ProductWeights {
  return { ...p, names: which === 'gateUp' ? [n.gate, n.up] : [n.down] };
}

/** A layer's attention products as stored: q | k | v (one product) and o. */
export function attentionProducts(source: TensorSource, spec: ModelSpec, l: number): { qkv: ProductWeights; o: ProductWeights } {
  const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const n = layerTensorNames(l);
  return {
    qkv: productWeights(source, spec, [n.qProj, n.kProj, n.vProj], [nh * hd, nkv * hd, nkv * hd], H),
    o: productWeights(source, spec, [n.oProj], [H], nh * hd),
  };
}

/**
 * A layer's latent attention products as stored (DeepSeek-V3): q_a | kv_a_proj_with_mqa (one product, the
 * same input), q_b and o; and kv_b_proj, which the latent attention kernels read (W_UK and W_UV halves).
 */
export function mlaProducts(source: TensorSource, spec: ModelSpec, l: number): { a: ProductWeights; qB: ProductWeights; kvB: ProductWeights; o: ProductWeights } {
  const { hiddenSize: H, numHeads: nh, headDim: rope } = spec;
  const m = spec.mla!;
  const n = deepseekV3Names(l);
  return {
    a: productWeights(source, spec, [n.qA, n.kvA], [m.qLoraRank, m.kvLoraRank + rope], H),
    qB: productWeights(source, spec, [n.qB], [nh * (m.qkNopeDim + rope)], m.qLoraRank),
    kvB: productWeights(source, spec, [n.kvB], [nh * (m.qkNopeDim + m.vHeadDim)], m.kvLoraRank),
    o: productWeights(source, spec, [n.oProj], [H], nh * m.vHeadDim),
  };
}

/** A SwiGLU MLP outside the banks (dense layer, shared expert): gate | up (one product) and down. */
export function mlpProducts(source: TensorSource, spec: ModelSpec, n: { readonly gate: string; readonly up: string; readonly down: string }, I: number): { gateUp: ProductWeights; down: ProductWeights } {
  const H = spec.hiddenSize;
  return { gateUp: productWeights(source, spec, [n.gate, n.up], [I, I], H), down: productWeights(source, spec, [n.down], [H], I) };
}

/** What the weights take on the device: everything but the routed experts, and one expert's bank row. */
export interface DeviceWeightBytes {
  readonly resident: number;
  readonly expertRow: number;
}

/** The device bytes of a model's weights as stored (the memory plan). */
export function deviceWeightBytes(source: TensorSource, spec: ModelSpec): DeviceWeightBytes {
  const stored = (name: string): number => source.info(name).bytes;
  let resident = stored(EMBED) + stored(FINAL_NORM) + (spec.tieWordEmbeddings ? 0 : stored(LM_HEAD));
  const moe = new Set(moeLayerIds(spec));
  const mlp = (n: { gate: string; up: string; down: string }, I: number): number => {
    const p = mlpProducts(source, spec, n, I);
    return productBytes(p.gateUp) + productBytes(p.down);
  };
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    const norms = [n.inputNorm, n.postAttnNorm];
    if (spec.mla) {
      const a = mlaProducts(source, spec, l);
      const dn = deepseekV3Names(l);
      resident += productBytes(a.a) + productBytes(a.qB) + productBytes(a.kvB) + productBytes(a.o);
      norms.push(dn.qANorm, dn.kvANorm);
    } else {
      const a = attentionProducts(source, spec, l);
      resident += productBytes(a.qkv) + productBytes(a.o);
      if (spec.qkNorm !== 'none') norms.push(n.qNorm, n.kNorm);
    }
    const x = layerExtras(spec, l);
    const extras = [...x.qkvBias, ...[x.oBias, x.sinks, x.routerBias].filter((v): v is string => v !== undefined)];
    for (const name of [...norms, ...extras]) resident += stored(name);
    if (!moe.has(l)) {
      resident += mlp(deepseekV3Names(l).dense, spec.denseIntermediate!);
      continue;
    }
    resident += stored(moeTensorNames(spec, l).router);
    if (spec.router?.kind === 'sigmoid_group') resident += 4 * spec.numExperts; // the correction bias, as float32
    if (spec.sharedIntermediate) resident += mlp(deepseekV3Names(l).shared, spec.sharedIntermediate);
  }
  return { resident, expertRow: expertRowLayout(source, spec).bytes };
}
