// Byte layouts of the device descriptors in kernels/common.cuh (ModelDev, LayerDev, RowDev, StepDev,
// WorkDev). Keep the two in step: every field here is written at the offset the C struct has.

export const LAYER_DEV_BYTES = 12 * 8;
export const MODEL_DEV_BYTES = 12 * 4 + 2 * 4 + 5 * 8;
export const ROW_DEV_BYTES = 4 * 4 + 8;
export const STEP_HEADER_BYTES = 4 * 4;
export const WORK_DEV_BYTES = 10 * 8;

export interface LayerPointers {
  inNorm: bigint; qProj: bigint; kProj: bigint; vProj: bigint; oProj: bigint; qNorm: bigint; kNorm: bigint;
  postNorm: bigint; router: bigint; hot: bigint; cold: bigint; slots: bigint;
}

export function encodeLayers(layers: readonly LayerPointers[]): Uint8Array {
  const b = Buffer.alloc(LAYER_DEV_BYTES * layers.length);
  layers.forEach((l, i) => {
    const order = [l.inNorm, l.qProj, l.kProj, l.vProj, l.oProj, l.qNorm, l.kNorm, l.postNorm, l.router, l.hot, l.cold, l.slots];
    order.forEach((p, j) => b.writeBigUInt64LE(p, i * LAYER_DEV_BYTES + 8 * j));
  });
  return b;
}

export interface ModelDims {
  H: number; nh: number; nkv: number; hd: number; E: number; K: number; I: number; V: number; L: number;
  normTopk: boolean; hotRows: number; maxPos: number; eps: number; theta: number;
}

export function encodeModel(d: ModelDims, p: { embed: bigint; finalNorm: bigint; lmHead: bigint; counter: bigint; layers: bigint }): Uint8Array {
  const b = Buffer.alloc(MODEL_DEV_BYTES);
  [d.H, d.nh, d.nkv, d.hd, d.E, d.K, d.I, d.V, d.L, d.normTopk ? 1 : 0, d.hotRows, d.maxPos].forEach((v, i) => b.writeInt32LE(v, 4 * i));
  b.writeFloatLE(d.eps, 48);
  b.writeFloatLE(d.theta, 52);
  [p.embed, p.finalNorm, p.lmHead, p.counter, p.layers].forEach((v, i) => b.writeBigUInt64LE(v, 56 + 8 * i));
  return b;
}

export interface RowInput { token: number; pos: number; valid: boolean; cap: number; kv: bigint }

/** Writes a StepDev (header + `rows`, padded with invalid rows up to `bucket`) into `out` (pinned memory). */
export function encodeStep(out: Uint8Array, count: boolean, rows: readonly RowInput[], bucket: number): number {
  const b = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
  b.writeInt32LE(count ? 1 : 0, 0);
  b.writeInt32LE(rows.length, 4);
  b.writeInt32LE(0, 8);
  b.writeInt32LE(0, 12);
  for (let i = 0; i < bucket; i++) {
    const o = STEP_HEADER_BYTES + i * ROW_DEV_BYTES;
    const r = rows[i];
    b.writeInt32LE(r ? r.token : 0, o);
    b.writeInt32LE(r ? r.pos : 0, o + 4);
    b.writeInt32LE(r?.valid ? 1 : 0, o + 8);
    b.writeInt32LE(r ? r.cap : 0, o + 12);
    b.writeBigUInt64LE(r ? r.kv : 0n, o + 16);
  }
  return STEP_HEADER_BYTES + bucket * ROW_DEV_BYTES;
}

export interface WorkPointers {
  hidden: bigint; xn: bigint; pickExpert: bigint; pickWeight: bigint; pickSlot: bigint; partial: bigint; logits: bigint; amax: bigint;
  /** Split attention partials (attn_route at long contexts) and the per-row count of finished split blocks. */
  attnPart: bigint; attnDone: bigint;
}

export function encodeWork(w: WorkPointers): Uint8Array {
  const b = Buffer.alloc(WORK_DEV_BYTES);
  [w.hidden, w.xn, w.pickExpert, w.pickWeight, w.pickSlot, w.partial, w.logits, w.amax, w.attnPart, w.attnDone].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  return b;
}

const a4 = (n: number): number => (n + 3) & ~3;

/** Dynamic shared memory of one row's layer scratch (RowSmem in kernels/attention.cuh), in bytes. */
export function rowSmemBytes(d: ModelDims, threads: number): number {
  const qd = d.nh * d.hd;
  const kd = d.nkv * d.hd;
  const groups = Math.max(1, Math.floor(threads / qd));
  return 4 * (2 * a4(d.H) + a4(qd + 2 * kd) + a4(qd) + a4(d.E) + 32 + a4(d.nh) + a4(groups * qd) + a4(d.nh * d.maxPos));
}

/** decode_layers: the row scratch plus the row's expert activations and outputs. */
export function decodeLayersSmemBytes(d: ModelDims, threads: number): number {
  return rowSmemBytes(d, threads) + 4 * (a4(d.K * 2 * d.I) + a4(d.K * d.I) + a4(d.K * d.H) + 3 * a4(d.K));
}

export function lmHeadSmemBytes(d: ModelDims, rowsPerBlock: number): number {
  return 4 * (a4(d.H) + 32) + 8 * rowsPerBlock;
}

export function expertFfnSmemBytes(d: ModelDims): number {
  return 4 * (a4(d.H) + 2 * d.I);
}
