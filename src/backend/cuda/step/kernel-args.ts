// Byte layouts of the kernels' arguments (kernels/product.cuh GemmProblem, attention.cuh OpRows,
// moe.cuh OpRoute and OpGroups), passed by value. Keep the two in step: each field at the C offset.
import type { ModelSpec } from '../../../model/spec.ts';
import type { KvDtypeCode } from '../../kv-dtype.ts';

/** One product of a step (GemmProblem). Grouped when `grpN` is set (the experts), else dense over `rows`. */
export interface GemmArgs {
  x: bigint; y: bigint; res?: bigint; w?: bigint;
  /** Grouped: the number of groups, each group's bank slot (the routing resolves it), rows and pick indices. */
  grpN?: bigint; grpSlot?: bigint; grpStart?: bigint; grpRows?: bigint;
  /** The combining down product (epilogue 'combine'): the row's pick weights in router order; grpSlot is then each pick's slot. */
  pickW?: bigint;
  hot?: bigint; cold?: bigint;
  tileN?: bigint; tileGroup?: bigint; tileRow0?: bigint;
  /** Bytes of a bank row, and byte offsets in it of this product's values (and its FP8 scale grid). */
  rowBytes?: number; wOff?: number; sOff?: number;
  ldx: number; ldy: number; O: number; K: number; rows?: number; xDiv?: number; hotRows?: number;
  /** Dense gemv with K staged whole: RMSNorm the input rows (times normW) first, writing them to normOut. */
  normW?: bigint; normOut?: bigint; eps?: number;
  /** Block FP8 weights: the dense matrix's scale grid, and the grid's shape (fp8-grid.ts); MXFP4: sLd scale bytes a row. */
  scales?: bigint; sRows?: number; sCols?: number; sLd?: number;
  /** The dense product's bias (bf16 [O]), or a grouped one's byte offset in the bank row (absent: none). */
  bias?: bigint; bOff?: number;
  /** SWIGLU: clamped (gpt-oss) when limit > 0; gate and up rows interleaved (2j, 2j + 1). */
  limit?: number; alpha?: number; guInterleave?: boolean;
  /** Dense gemv: issue the first weight loads before waiting for the kernel before (PDL). */
  early?: boolean;
  /** Gemv: product.cuh's L2_* bits (evict-first weight loads). */
  l2?: number;
  /** Grouped gemv at a host lane step: device {slot, first feature} of the expert split with the host (host_exchange.cuh). */
  part?: bigint;
}

export const GEMM_PROBLEM_BYTES = 14 * 8 + 2 * 8 + 8 * 4 + 2 * 8 + 8 + 2 * 8 + 4 * 4 + 2 * 8 + 4 * 4 + 2 * 4 + 8;

export function encodeGemm(a: GemmArgs): Uint8Array {
  const b = Buffer.alloc(GEMM_PROBLEM_BYTES);
  const ptrs = [a.x, a.y, a.res, a.w, a.grpN, a.grpSlot, a.grpStart, a.grpRows, a.pickW, a.hot, a.cold, a.tileN, a.tileGroup, a.tileRow0];
  ptrs.forEach((p, i) => b.writeBigUInt64LE(p ?? 0n, 8 * i));
  b.writeBigInt64LE(BigInt(a.rowBytes ?? 0), 112);
  b.writeBigInt64LE(BigInt(a.wOff ?? 0), 120);
  [a.ldx, a.ldy, a.O, a.K, a.rows ?? 0, a.xDiv ?? 1, a.hotRows ?? 0, 0].forEach((v, i) => b.writeInt32LE(v, 128 + 4 * i));
  b.writeBigUInt64LE(a.normW ?? 0n, 160);
  b.writeBigUInt64LE(a.normOut ?? 0n, 168);
  b.writeFloatLE(a.eps ?? 0, 176);
  b.writeBigUInt64LE(a.scales ?? 0n, 184);
  b.writeBigInt64LE(BigInt(a.sOff ?? 0), 192);
  [a.sRows ?? 1, a.sCols ?? 1, a.sLd ?? 0, 0].forEach((v, i) => b.writeInt32LE(v, 200 + 4 * i));
  b.writeBigUInt64LE(a.bias ?? 0n, 216);
  b.writeBigInt64LE(BigInt(a.bOff ?? -1), 224);
  b.writeFloatLE(a.limit ?? 0, 232);
  b.writeFloatLE(a.alpha ?? 0, 236);
  b.writeInt32LE(a.guInterleave ? 1 : 0, 240);
  b.writeInt32LE(a.early ? 1 : 0, 248);
  b.writeInt32LE(a.l2 ?? 0, 252);
  b.writeBigUInt64LE(a.part ?? 0n, 256);
  return b;
}

/** Sequences one piece holds at most (planPieces: 16 whose outputs it computes, and one cut at its end). */
export const MAX_PIECE_SEQS = 17;

/**
 * The step rows of a piece of T rows, as one host -> device copy: header (valid rows, count flag) | token, pos [T]
 * int32 | out rows [16] int32 | table [T] u64 (each row's block table: an address in this buffer) | the block tables,
 * one a sequence of the piece (at most MAX_PIECE_SEQS) and a scratch one for padding rows, `maxBlocks` int32 each.
 * Offsets depend on T, so a captured graph (one bucket) and its copy agree.
 */
export function stepLayout(T: number, maxBlocks: number): { token: number; pos: number; out: number; table: number; tables: number; tableSlots: number; bytes: number } {
  const token = 16, pos = token + 4 * T, out = pos + 4 * T;
  const table = Math.ceil((out + 4 * 16) / 8) * 8;
  const tables = table + 8 * T;
  const tableSlots = Math.min(T, MAX_PIECE_SEQS) + 1;
  return { token, pos, out, table, tables, tableSlots, bytes: tables + 4 * maxBlocks * tableSlots };
}

/** OpRows (attention.cuh): the rows' arrays and the KV pool they address. */
export interface RowArrays { token: bigint; pos: bigint; table: bigint; pool: bigint; blockSize: number; layers: number; dtype: KvDtypeCode }

export function encodeRows(r: RowArrays): Uint8Array {
  const b = Buffer.alloc(48);
  [r.token, r.pos, r.table, r.pool].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  [r.blockSize, r.layers, r.dtype, 0].forEach((v, i) => b.writeInt32LE(v, 32 + 4 * i));
  return b;
}

/** AttnParams (attention.cuh): how a layer attends (pointers 0n: none; window 0: every position). */
export interface AttnArgs { qNorm: bigint; kNorm: bigint; invFreq: bigint; sinks: bigint; eps: number; mscale: number; window: number }

export function encodeAttn(a: AttnArgs): Uint8Array {
  const b = Buffer.alloc(48);
  [a.qNorm, a.kNorm, a.invFreq, a.sinks].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  b.writeFloatLE(a.eps, 32);
  b.writeFloatLE(a.mscale, 36);
  b.writeInt32LE(a.window, 40);
  return b;
}

export interface RouteArgs {
  logits: bigint; pickExpert: bigint; pickWeight: bigint; pickSlot: bigint; slots: bigint; counter: bigint; header: bigint;
  /** layer: the index among the MoE layers (pickExpert / pickWeight hold LK = MoE layers x K a row). */
  T: number; E: number; K: number; LK: number; layer: number;
  /**
   * route.cuh's ROUTE_*: softmax over all then top-k (renormalized or not), top-k then softmax over the k, or
   * DeepSeek-V3's group-limited sigmoid choice (its correction bias, groups and weight factor in `group`).
   */
  mode: RouteMode;
  group?: { choiceBias: bigint; nGroup: number; topkGroup: number; scaling: number; renorm: boolean };
}

export type RouteMode = 'softmax' | 'softmax_renorm' | 'topk_softmax' | 'sigmoid_group';
const ROUTE_MODES: Record<RouteMode, number> = { softmax: 0, softmax_renorm: 1, topk_softmax: 2, sigmoid_group: 3 };

/** How a model's router picks (the spec's router and normTopkProb) as the routing kernels take it. */
export function routeModeOf(s: ModelSpec): RouteMode {
  const rk = s.router?.kind;
  return rk === 'sigmoid_group' ? 'sigmoid_group' : rk === 'topk_softmax' ? 'topk_softmax' : s.normTopkProb ? 'softmax_renorm' : 'softmax';
}

export const ROUTE_BYTES = 104;

export function encodeRoute(a: RouteArgs): Uint8Array {
  const b = Buffer.alloc(ROUTE_BYTES);
  [a.logits, a.pickExpert, a.pickWeight, a.pickSlot, a.slots, a.counter, a.header].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  [a.T, a.E, a.K, a.LK, a.layer, ROUTE_MODES[a.mode]].forEach((v, i) => b.writeInt32LE(v, 56 + 4 * i));
  const g = a.group;
  b.writeBigUInt64LE(g?.choiceBias ?? 0n, 80);
  b.writeInt32LE(g?.nGroup ?? 1, 88);
  b.writeInt32LE(g?.topkGroup ?? 1, 92);
  b.writeFloatLE(g?.scaling ?? 1, 96);
  b.writeInt32LE(g?.renorm ? 1 : 0, 100);
  return b;
}

/** Shared floats one row's route takes (moe.cuh route_scratch): the logits, and the group choice's scratch. */
export function routeScratch(mode: RouteMode, E: number): number {
  return mode === 'sigmoid_group' ? 2 * E : E;
}

/** Dynamic shared memory of op_route_group over T decode rows (a warp a row, at least 4): each warp's route scratch, the picks' expert, weight and slot, and the slot table, counts and cursors [E]. */
export function routeGroupSmemBytes(T: number, K: number, E: number, mode: RouteMode): number {
  return 4 * (Math.max(4, T) * routeScratch(mode, E) + 3 * T * K + 3 * E);
}

/** Dynamic shared memory of op_route_rows (8 warps, a row each: their route scratch) and of op_group (counts and cursors [E]). */
export function routeRowsSmemBytes(mode: RouteMode, E: number): number {
  return 4 * 8 * routeScratch(mode, E);
}
export function groupSmemBytes(E: number): number {
  return 4 * 2 * E;
}

/** Dynamic shared memory of op_residual_norm: a row of H floats (16-byte aligned), then the block sum's 32. */
export function residualNormSmemBytes(H: number): number {
  return 4 * (((H + 3) & ~3) + 32);
}

/** MlaParams (mla.cuh): a layer's multi-head latent attention (DeepSeek-V3). */
export interface MlaArgs {
  qANorm: bigint; kvANorm: bigint;
  /** kv_b_proj as stored, and (block FP8) its scale grid and the grid's shape (fp8-grid.ts). */
  kvB: bigint; kvBScales: bigint; sRows?: number; sCols?: number; sLd?: number;
  invFreq: bigint; eps: number; mscale: number; scale: number;
  nh: number; qLora: number; kvLora: number; rope: number; nope: number; vd: number; layer: number;
}

export function encodeMla(a: MlaArgs): Uint8Array {
  const b = Buffer.alloc(96);
  [a.qANorm, a.kvANorm, a.kvB, a.kvBScales, a.invFreq].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  [a.eps, a.mscale, a.scale].forEach((v, i) => b.writeFloatLE(v, 40 + 4 * i));
  [a.nh, a.qLora, a.kvLora, a.rope, a.nope, a.vd, a.layer].forEach((v, i) => b.writeInt32LE(v, 52 + 4 * i));
  [a.sRows ?? 1, a.sCols ?? 1, a.sLd ?? 0, 0].forEach((v, i) => b.writeInt32LE(v, 80 + 4 * i));
  return b;
}

/** A layer's groups of picks (moe.cuh OpGroups): each group's bank slot, its range in `rows`, the tensor-core tiles. */
export interface GroupArrays { n: bigint; slot: bigint; start: bigint; rows: bigint; tileN: bigint; tileGroup: bigint; tileRow0: bigint }

export function encodeGroups(g: GroupArrays): Uint8Array {
  const b = Buffer.alloc(7 * 8);
  [g.n, g.slot, g.start, g.rows, g.tileN, g.tileGroup, g.tileRow0].forEach((p, i) => b.writeBigUInt64LE(p, 8 * i));
  return b;
}

/** host_exchange.cuh's HostPost: what a decode step's routing needs to hand picks to the host expert lane (mailbox 0n: none). */
export interface HostPostArgs { mailbox: bigint; state: bigint; x: bigint; hotRows: number; I: number; H: number; layer: number }
export const HOST_POST_BYTES = 40;
export function encodeHostPost(h: HostPostArgs | null): Uint8Array {
  const b = Buffer.alloc(HOST_POST_BYTES);
  if (!h) return b;
  b.writeBigUInt64LE(h.mailbox, 0);
  b.writeBigUInt64LE(h.state, 8);
  b.writeBigUInt64LE(h.x, 16);
  [h.hotRows, h.I, h.H, h.layer].forEach((v, i) => b.writeInt32LE(v, 24 + 4 * i));
  return b;
}

/** Whether a gemv of B rows stages all K of a row at once (the condition for its fused norm). */
export function gemvStagesWhole(B: number, K: number): boolean {
  return Math.max(Math.floor(16384 / B), 256) >= K;
}

/** Dynamic shared memory of a gemv launch with B rows a group (gemv.cuh: B * min(max(16384 / B, 256), K) floats). */
export function gemvSmemBytes(B: number, K: number): number {
  return 4 * B * Math.min(Math.max(Math.floor(16384 / B), 256), K);
}

/** Input values a warp of the combining down product stages at a time (gemv.cuh COMBINE_KC). */
export const COMBINE_KC = 2048;

/** Dynamic shared memory of the combining down product over `picks` picks (a warp each): its K chunk of each pick's row. */
export function combineSmemBytes(picks: number, K: number): number {
  return 4 * picks * Math.min(COMBINE_KC, K);
}

/** Tensor-core tiles of a grouped product over `picks` picks of at most `E` experts (64-row tiles). */
export function maxGroupedTiles(picks: number, E: number): number {
  return Math.ceil(picks / 64) + Math.min(E, picks);
}
