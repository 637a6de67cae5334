// The layout of one expert row in the CPU banks. Float32 experts: gate [I][H] | up [I][H] | down [H][I]
// (gpt-oss: then its biases [I] | [I] | [H]), one float each. Quantized (and bf16 kept as stored) experts keep their stored bytes:
// gate data | up data | down data | gate scales | up scales | down scales (| INT4's gate, up and down zero points)
// (| the three float32 biases), each part at a 4-byte boundary of the row. Rows are counted in 4-byte words either way, so a bank is Float32Array
// pieces of whole rows (banks.ts) whose rows swaps move as bytes (a same-type set copies bits) and the digest hashes whole.
import { ResidencyError } from '../../errors.ts';
import { isQuantized, type Int4ScaleType, type QuantMatrix } from '../../model/quant.ts';
import type { Int4Spec } from '../../model/int4-config.ts';
import { isInt4Weight, int4Parts } from '../../model/int4-tensors.ts';
import { int4Matrix, int4ScaleType } from '../../model/int4-repack.ts';
import { int4Group } from '../../model/int4-config.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, RawTensor, StoredExpert } from '../../model/weights.ts';
import { tensorToFloat32 } from '../../model/float-convert.ts';
import { readBf16Checked } from '../../model/tensor-source.ts';
import { checkFp8Data, fp8ScaleName, fp8Scales } from '../../model/quant-read.ts';
import type { QuantExpert } from './quant-linear.ts';

/** Where each part of a quantized expert row lies, in bytes from the row's start. */
export interface QuantRowLayout {
  readonly words: number;
  /** Byte offsets of gate, up and down data, then of their scales. */
  readonly data: readonly [number, number, number];
  readonly scales: readonly [number, number, number];
  /** Byte offsets of INT4 zero points (where a matrix has none, the offset the next part starts at). */
  readonly zeros: readonly [number, number, number];
  /** Byte offset of the biases (gpt-oss), or -1. */
  readonly bias: number;
  /** The three matrices' format and shape (their data and scales are views made per row). */
  readonly shapes: readonly [QuantShape, QuantShape, QuantShape];
}

/** A quantized matrix without its bytes: plain data, so worker threads get it in their init. */
export interface QuantShape {
  readonly format: QuantMatrix['format'];
  readonly rows: number;
  readonly cols: number;
  readonly block: readonly [number, number];
  /** Data bytes and scale count. */
  readonly dataBytes: number;
  readonly scaleCount: number;
  /** INT4: the scales' 16-bit type and the zero points' count (0: symmetric). */
  readonly scaleType?: Int4ScaleType;
  readonly zeroCount?: number;
}

/** Bytes a scale of the format takes in a row. */
const SCALE_BYTES: Record<QuantMatrix['format'], number> = { fp8: 4, mxfp4: 1, bf16: 1, int4: 2 };

/** How a model's expert rows are stored: float32 (`quant` null) or quantized (its layout). */
export interface ExpertRowFormat {
  /** 4-byte words per row. */
  readonly words: number;
  readonly quant: QuantRowLayout | null;
}

const align4 = (n: number): number => Math.ceil(n / 4) * 4;

function sameFormat(a: QuantMatrix, b: QuantMatrix): boolean {
  return a.format === b.format && a.rows === b.rows && a.cols === b.cols && a.block[0] === b.block[0] && a.block[1] === b.block[1] &&
    a.data.length === b.data.length && a.scales.length === b.scales.length &&
    (a.format !== 'int4' || (b.format === 'int4' && a.scaleType === b.scaleType && a.zeros.length === b.zeros.length));
}

/** A quantized matrix's shape without its bytes. */
function shapeOf(m: QuantMatrix): QuantShape {
  const s = { format: m.format, rows: m.rows, cols: m.cols, block: m.block, dataBytes: m.data.byteLength, scaleCount: m.scales.length };
  return m.format === 'int4' ? { ...s, scaleType: m.scaleType, zeroCount: m.zeros.length } : s;
}

/**
 * The row format of `experts` (every routed expert of every MoE layer): all float32 or all quantized in one
 * format and block shape (a checkpoint mixing them is refused: a bank's rows share one layout).
 */
export function expertRowFormat(spec: ModelSpec, experts: readonly ExpertWeights[]): ExpertRowFormat {
  const I = spec.expertIntermediate;
  const H = spec.hiddenSize;
  const biases = spec.expertAct ? 2 * I + H : 0;
  const first = experts[0];
  if (first?.stored) return storedRowFormat(experts, I, H, biases);
  if (!first || !isQuantized(first.gate)) {
    for (const e of experts) {
      if (isQuantized(e.gate) || isQuantized(e.up) || isQuantized(e.down)) throw mixed();
    }
    return { words: 3 * I * H + biases, quant: null };
  }
  const shapes = [first.gate, first.up, first.down] as const;
  if (!isQuantized(shapes[1]) || !isQuantized(shapes[2])) throw mixed();
  for (const e of experts) {
    const ms = [e.gate, e.up, e.down];
    if (!ms.every((m, i) => isQuantized(m) && sameFormat(m, shapes[i] as QuantMatrix))) throw mixed();
  }
  const q = (shapes as readonly QuantMatrix[]).map(shapeOf) as [QuantShape, QuantShape, QuantShape];
  return quantRowFormat(q, biases);
}

/** The row layout of quantized (or bf16 kept as stored) matrices of shapes `q`, then `biases` floats. */
function quantRowFormat(q: readonly [QuantShape, QuantShape, QuantShape], biases: number): ExpertRowFormat {
  let at = 0;
  const place = (bytes: number): number => {
    const o = at;
    at = align4(at + bytes);
    return o;
  };
  const data = [place(q[0].dataBytes), place(q[1].dataBytes), place(q[2].dataBytes)] as const;
  const scales = q.map((m) => place(m.scaleCount * SCALE_BYTES[m.format])) as [number, number, number];
  const zeros = q.map((m) => place(m.zeroCount ?? 0)) as [number, number, number];
  const bias = biases > 0 ? place(4 * biases) : -1;
  return { words: at / 4, quant: { words: at / 4, data, scales, zeros, bias, shapes: q } };
}

/**
 * The row format of streamed experts (StoredExpert: left in the checkpoint, read at bank fill), from the first
 * one's gate tensor: block FP8 kept as stored with its scales (the layout of loaded FP8 experts), bf16 kept as
 * stored when they ask for it, else float32. A stored tensor of another dtype than the format's is refused when
 * its row is written (storedRowWriter), as a loaded one is here.
 */
function storedRowFormat(experts: readonly ExpertWeights[], I: number, H: number, biases: number): ExpertRowFormat {
  if (!experts.every((e) => e.stored)) throw mixed();
  if (biases > 0) throw new ResidencyError('INTERNAL', 'streamed experts with biases (gpt-oss) are not supported: load them');
  const s = experts[0]!.stored!;
  if (s.int4 && isInt4Weight(s.int4, s.gate, [I, H])) {
    const q = s.int4;
    const int4 = (name: string, rows: number, cols: number): QuantShape => {
      const scales = int4Parts(q, name, [rows, cols]).find((p) => p.role === 'scales')!.name;
      const G = int4Group(q, cols);
      const n = rows * (cols / G);
      return { format: 'int4', rows, cols, block: [1, G], dataBytes: (rows * cols) / 2, scaleCount: n, scaleType: int4ScaleType(s.source.info(scales).dtype), zeroCount: q.zeroPoints ? n : 0 };
    };
    return quantRowFormat([int4(s.gate, I, H), int4(s.up, I, H), int4(s.down, H, I)], 0);
  }
  const dtype = s.source.info(s.gate).dtype;
  if (dtype === 'F8_E4M3') {
    const block = fp8BlockOf(s, s.gate);
    const fp8 = (rows: number, cols: number): QuantShape => ({
      format: 'fp8', rows, cols, block, dataBytes: rows * cols, scaleCount: Math.ceil(rows / block[0]) * Math.ceil(cols / block[1]),
    });
    return quantRowFormat([fp8(I, H), fp8(I, H), fp8(H, I)], 0);
  }
  if (!(s.keepBf16 && dtype === 'BF16')) return { words: 3 * I * H, quant: null };
  const bf16 = (rows: number, cols: number): QuantShape => ({ format: 'bf16', rows, cols, block: [1, 1], dataBytes: 2 * rows * cols, scaleCount: 0 });
  return quantRowFormat([bf16(I, H), bf16(I, H), bf16(H, I)], 0);
}

/** A streamed F8_E4M3 tensor's block shape: the config's, as tensorReader refuses FP8 bytes without one. */
function fp8BlockOf(e: StoredExpert, name: string): readonly [number, number] {
  if (!e.fp8Block) throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}" is F8_E4M3 but config.json declares no fp8 quantization`);
  return e.fp8Block;
}

/**
 * Writes streamed experts' rows in format `f`, each tensor read from its source straight into the row: FP8 data
 * and bf16 kept as stored land in place (then checked there), FP8 scales are read into a staging buffer and
 * widened into the row (fp8Scales: the loaded path's checks); float32 rows are read into one reused staging
 * buffer and widened into the row (tensorToFloat32: the same bits as a loaded expert's, the same checks).
 */
export function storedRowWriter(f: ExpertRowFormat, I: number, H: number): (bank: Float32Array, off: number, e: StoredExpert) => void {
  let staging = new Uint8Array(0);
  const stage = (e: StoredExpert, name: string, bytes: number): Uint8Array => {
    if (staging.length < bytes) staging = new Uint8Array(bytes);
    const b = staging.subarray(0, bytes);
    e.source.read(name, b);
    return b;
  };
  const stagings: Uint8Array[] = [];
  const stageAt = (k: number, e: StoredExpert, name: string, bytes: number): Uint8Array => {
    if ((stagings[k]?.length ?? -1) < bytes) stagings[k] = new Uint8Array(bytes);
    const b = stagings[k]!.subarray(0, bytes);
    e.source.read(name, b);
    return b;
  };
  const names = (e: StoredExpert): readonly [string, string, string] => [e.gate, e.up, e.down];
  const sizes = [I * H, I * H, H * I] as const;
  return (bank, off, e) => {
    const q = f.quant;
    const at = bank.byteOffset + 4 * off;
    names(e).forEach((name, i) => {
      if (q?.shapes[i]!.format === 'int4') {
        const shape = q.shapes[i]!;
        if (!e.int4 || !isInt4Weight(e.int4, name, [shape.rows, shape.cols])) throw mixed();
        const into = {
          data: new Uint8Array(bank.buffer, at + q.data[i]!, shape.dataBytes),
          scales: new Uint16Array(bank.buffer, at + q.scales[i]!, shape.scaleCount),
          zeros: new Uint8Array(bank.buffer, at + q.zeros[i]!, shape.zeroCount ?? 0),
        };
        // Each stored tensor read into a staging buffer of its own (they are repacked together).
        let k = 0;
        const read = (n: string): RawTensor | undefined => {
          if (!e.source.has(n)) return undefined;
          const t = e.source.info(n);
          return { name: n, dtype: t.dtype as RawTensor['dtype'], shape: t.shape, bytes: stageAt(k++, e, n, t.bytes) };
        };
        const m = int4Matrix(e.int4, name, shape.rows, shape.cols, read, into);
        if (m.scaleType !== shape.scaleType) throw mixed();
        return;
      }
      const t = e.source.info(name);
      if (q?.shapes[i]!.format === 'fp8') {
        const shape = q.shapes[i]!;
        if (t.dtype !== 'F8_E4M3' || t.bytes !== sizes[i]!) throw mixed();
        const block = fp8BlockOf(e, name);
        if (block[0] !== shape.block[0] || block[1] !== shape.block[1]) throw mixed();
        const data = new Uint8Array(bank.buffer, at + q.data[i]!, shape.dataBytes);
        e.source.read(name, data);
        checkFp8Data(name, shape.rows, shape.cols, data);
        const sName = fp8ScaleName(name);
        const s = e.source.info(sName);
        const scales = new Float32Array(bank.buffer, at + q.scales[i]!, shape.scaleCount);
        fp8Scales({ name: sName, dtype: s.dtype as RawTensor['dtype'], shape: s.shape, bytes: stage(e, sName, s.bytes) }, shape.cols, block, scales);
        return;
      }
      if (q) {
        if (t.dtype !== 'BF16' || t.bytes !== 2 * sizes[i]!) throw mixed();
        readBf16Checked(e.source, t, new Uint16Array(bank.buffer, at + q.data[i]!, sizes[i]!));
        return;
      }
      if (t.dtype === 'F8_E4M3') throw mixed();
      if (e.keepBf16 && t.dtype === 'BF16') throw mixed(); // loaded, it would be a bf16 matrix among float32 ones
      const bytes = stage(e, name, t.bytes);
      const w = off + i * I * H;
      tensorToFloat32({ name, dtype: t.dtype as RawTensor['dtype'], shape: t.shape, bytes }, { finite: true, into: bank.subarray(w, w + sizes[i]!) });
    });
  };
}

function mixed(): ResidencyError {
  return new ResidencyError('UNSUPPORTED_MODEL', 'the routed experts are stored in more than one format (float and quantized, or two quantized shapes); every expert must be stored alike');
}

/** Writes expert `e` into `bank` at word `off` in the row format (its float32 values, or its stored bytes). */
export function writeExpertRow(bank: Float32Array, off: number, e: ExpertWeights, f: ExpertRowFormat, I: number, H: number): void {
  const q = f.quant;
  if (!q) {
    const gate = e.gate as Float32Array;
    bank.set(gate, off);
    bank.set(e.up as Float32Array, off + I * H);
    bank.set(e.down as Float32Array, off + 2 * I * H);
    if (f.words > 3 * I * H) {
      bank.set(e.gateBias!, off + 3 * I * H);
      bank.set(e.upBias!, off + 3 * I * H + I);
      bank.set(e.downBias!, off + 3 * I * H + 2 * I);
    }
    return;
  }
  const bytes = new Uint8Array(bank.buffer, bank.byteOffset + 4 * off, 4 * f.words);
  [e.gate, e.up, e.down].forEach((m, i) => {
    const qm = m as QuantMatrix;
    bytes.set(new Uint8Array(qm.data.buffer, qm.data.byteOffset, qm.data.byteLength), q.data[i]!);
    bytes.set(new Uint8Array(qm.scales.buffer, qm.scales.byteOffset, qm.scales.byteLength), q.scales[i]!);
    if (qm.format === 'int4') bytes.set(qm.zeros, q.zeros[i]!);
  });
  if (q.bias >= 0) {
    const b = new Float32Array(bank.buffer, bank.byteOffset + 4 * off + q.bias, 2 * I + H);
    b.set(e.gateBias!, 0);
    b.set(e.upBias!, I);
    b.set(e.downBias!, 2 * I);
  }
}

/** Views of the quantized row at word `off` of `bank`: reads see whatever expert the row holds now. */
export function quantRowView(bank: Float32Array, off: number, q: QuantRowLayout, I: number, H: number): QuantExpert {
  const base = bank.byteOffset + 4 * off;
  const view = (i: number): QuantMatrix => {
    const { format, rows, cols, block, dataBytes, scaleCount, scaleType, zeroCount } = q.shapes[i]!;
    const at = base + q.scales[i]!;
    if (format === 'bf16') return { format, rows, cols, block, data: new Uint16Array(bank.buffer, base + q.data[i]!, dataBytes / 2), scales: new Uint8Array(0) };
    const data = new Uint8Array(bank.buffer, base + q.data[i]!, dataBytes);
    if (format === 'int4') {
      return { format, rows, cols, block, data, scales: new Uint16Array(bank.buffer, at, scaleCount), scaleType: scaleType!, zeros: new Uint8Array(bank.buffer, base + q.zeros[i]!, zeroCount ?? 0) };
    }
    return format === 'fp8'
      ? { format, rows, cols, block, data, scales: new Float32Array(bank.buffer, at, scaleCount) }
      : { format, rows, cols, block, data, scales: new Uint8Array(bank.buffer, at, scaleCount) };
  };
  const e = { gate: view(0), up: view(1), down: view(2) };
  if (q.bias < 0) return e;
  const b = (at: number, n: number): Float32Array => new Float32Array(bank.buffer, base + q.bias + 4 * at, n);
  return { ...e, gateBias: b(0, I), upBias: b(I, I), downBias: b(2 * I, H) };
}

/** Views of every row of every bank (`banks`: CpuExpertBanks.pieces, rows of `q.words` words). */
export function quantRowViews(banks: readonly Float32Array[], q: QuantRowLayout, I: number, H: number): QuantExpert[][] {
  return banks.map((bank) => Array.from({ length: bank.length / q.words }, (_, r) => quantRowView(bank, r * q.words, q, I, H)));
}
