// How each kernel of a step is launched: its entry point, grid, block, dynamic shared memory and argument list, from
// named arguments. step-kernels.ts decides which kernels a step runs on which buffers; these say how each one runs,
// so the op-by-op device tests (test/gpu/ops.gpu.ts) launch exactly what a step launches.
import type { KernelArg } from '../driver/driver.ts';
import type { AttendHeadDim, GemvEpilogue, KernelName, WeightInfix } from '../driver/kernels.ts';
import type { WeightFormat } from '../weights/device-weights.ts';
import { ARGMAX_BLOCKS } from '../memory/workspace.ts';
import {
  combineSmemBytes, encodeGemm, encodeMla, gemvSmemBytes, groupSmemBytes, residualNormSmemBytes, routeGroupSmemBytes, routeRowsSmemBytes,
  type GemmArgs, type MlaArgs, type RouteMode,
} from './kernel-args.ts';

export interface Launch {
  readonly name: KernelName;
  readonly grid: [number, number, number];
  readonly block: number;
  readonly smem: number;
  readonly args: KernelArg[];
}

/** Warps of a gemv block (gemv.cuh GEMV_WARPS). */
export const GEMV_WARPS = 8;
/** Threads of a tensor-core block (gemm_tc.cuh: 4 warps of 32 x 32). */
const TC_THREADS = 128;
/** Threads a block of op_argmax_rows: a row's 152K logits in ~5 loads a thread over its ARGMAX_BLOCKS blocks. */
const ARGMAX_THREADS = 1024;
/** Name infix of a product's weight format. */
export const INFIX: Record<WeightFormat, WeightInfix> = { bf16: '', fp8: 'fp8_', mxfp4: 'mxfp4_' };
export type GemvRows = 1 | 2 | 4 | 8 | 16;

const f32 = (v: number): KernelArg => ({ f32: v });
const i32 = (v: number): KernelArg => ({ i32: v });
const u64 = (v: bigint): KernelArg => ({ u64: v });

/** A decode product: B rows a group over `groups` groups (grid.y), R output features a warp. */
export function gemvLaunch(format: WeightFormat, B: GemvRows, R: 1 | 2, epi: GemvEpilogue, groups: number, a: GemmArgs): Launch {
  return { name: `op_gemv_${INFIX[format]}b${B}_r${R}_${epi}`, grid: [Math.ceil(a.O / (GEMV_WARPS * R)), groups, 1], block: GEMV_WARPS * 32, smem: gemvSmemBytes(B, a.K), args: [{ bytes: encodeGemm(a) }] };
}

/** The batch-1 bf16 dense product that stores, its features split evenly over `blocks` blocks (plan.ts oneWaveFeatureBlocks). */
export function gemvEvenLaunch(R: 1 | 2, blocks: number, groups: number, a: GemmArgs): Launch {
  return { name: `op_gemv_b1_r${R}_store_even`, grid: [blocks, groups, 1], block: GEMV_WARPS * 32, smem: gemvSmemBytes(1, a.K), args: [{ bytes: encodeGemm(a) }] };
}

/** The batch-1 expert down product adding its `picks` picks (a warp each) to the residual, R features of every pick a block. */
export function combineLaunch(format: WeightFormat, R: 1 | 2 | 4, picks: number, a: GemmArgs): Launch {
  return { name: `op_gemv_${INFIX[format]}b1_r${R}_combine`, grid: [Math.ceil(a.O / R), 1, 1], block: 32 * picks, smem: combineSmemBytes(picks, a.K), args: [{ bytes: encodeGemm(a) }] };
}

/** A tensor-core product over `tiles` 64-row tiles: 64 features a block, or 32 SwiGLU units (their gate and up rows). */
export function gemmTcLaunch(format: WeightFormat, epi: GemvEpilogue, tiles: number, a: GemmArgs): Launch {
  const gx = epi === 'swiglu' ? Math.ceil(a.O / 32) : Math.ceil(a.O / 64);
  return { name: `op_gemm_tc_${INFIX[format]}${epi}`, grid: [gx, tiles, 1], block: TC_THREADS, smem: 0, args: [{ bytes: encodeGemm(a) }] };
}

/** op_residual_norm's arguments (step.cu): mode 0 the embedding, 1 hidden + the previous MoE layer's picks, 2 hidden. */
export interface ResidualNormArgs {
  mode: 0 | 1 | 2;
  hidden: bigint; partial: bigint; pickWeight: bigint; LK: number; prevLayer: number; K: number;
  /** Input row of each output row (0n: row i). */
  rows: bigint;
  tokens: bigint; fedKeys: bigint; embed: bigint;
  w: bigint; out: bigint; H: number; eps: number;
}

/** `n` output rows, a block each. */
export function residualNormLaunch(n: number, a: ResidualNormArgs): Launch {
  // 1,024 threads: a row is one block, and each thread's columns (their K partials' loads, then the store) run
  // one after another; 2 columns a thread at hidden 2048 (fewer threads ran slower: docs/results.md).
  return {
    name: 'op_residual_norm', grid: [n, 1, 1], block: 1024, smem: residualNormSmemBytes(a.H),
    args: [i32(a.mode), u64(a.hidden), u64(a.partial), u64(a.pickWeight), i32(a.LK), i32(a.prevLayer), i32(a.K), u64(a.rows), u64(a.tokens), u64(a.fedKeys),
      u64(a.embed), u64(a.w), u64(a.out), i32(a.H), f32(a.eps)],
  };
}

/** OLMoE's q and k normed over the whole projections of T rows of q | k | v (ld floats a row), in place. */
export function qkNormWholeLaunch(T: number, a: { qkv: bigint; ld: number; qNorm: bigint; kNorm: bigint; QD: number; KD: number; eps: number }): Launch {
  return { name: 'op_qk_norm_whole', grid: [T, 2, 1], block: 256, smem: 0, args: [u64(a.qkv), i32(a.ld), u64(a.qNorm), u64(a.kNorm), i32(a.QD), i32(a.KD), f32(a.eps)] };
}

/** A layer's attention inputs: q | k | v rows (ld floats a row), the step rows (encodeRows), AttnParams (encodeAttn). */
export interface AttentionArgs { qkv: bigint; ld: number; rows: Uint8Array; params: Uint8Array; layer: number; nh: number; nkv: number; hd: AttendHeadDim }

/** The q/k norm, RoPE and KV write of T rows ahead of a prefill chunk's attention: a warp a head, 4 heads a block. */
export function qkRopeKvLaunch(T: number, a: AttentionArgs): Launch {
  return {
    name: 'op_qk_rope_kv', grid: [T, Math.ceil((a.nh + a.nkv) / 4), 1], block: 128, smem: 0,
    args: [u64(a.qkv), i32(a.ld), { bytes: a.rows }, { bytes: a.params }, i32(a.layer), i32(a.nh), i32(a.nkv), i32(a.hd)],
  };
}

/**
 * Attention of T rows, a block per (row, kv head, split of S): `fused` (decode rows of distinct sequences) normalizes,
 * rotates and writes k and v itself; else op_qk_rope_kv ran first. S > 1 leaves partials in `part` for op_attend_merge.
 */
export function attendLaunch(fused: boolean, T: number, S: number, a: AttentionArgs & { att: bigint; part: bigint }): Launch {
  const G = a.nh / a.nkv;
  return {
    name: `op_attend${fused ? '_decode' : ''}_hd${a.hd}_g${G as 1 | 2 | 4 | 8 | 16}`, grid: [T, a.nkv, S], block: G === 16 ? 128 : 256, smem: 0,
    args: [u64(a.qkv), i32(a.ld), { bytes: a.rows }, u64(a.att), u64(a.part), i32(a.layer), i32(a.nh), i32(a.nkv), { bytes: a.params }],
  };
}

/** The S splits of T rows' attention merged into att (with each head's sink logit, when given). */
export function attendMergeLaunch(T: number, a: { part: bigint; att: bigint; nh: number; hd: number; S: number; sinks: bigint }): Launch {
  return { name: 'op_attend_merge', grid: [T, a.nh, 1], block: Math.max(32, a.hd), smem: 0, args: [u64(a.part), u64(a.att), i32(a.nh), i32(a.hd), i32(a.S), u64(a.sinks)] };
}

/** A decode step's routing and grouping in one block, a warp a row (at least 4): OpRoute, OpGroups and HostPost bytes. */
export function routeGroupLaunch(T: number, K: number, E: number, mode: RouteMode, route: Uint8Array, groups: Uint8Array, hostPost: Uint8Array): Launch {
  return { name: 'op_route_group', grid: [1, 1, 1], block: 32 * Math.max(4, T), smem: routeGroupSmemBytes(T, K, E, mode), args: [{ bytes: route }, { bytes: groups }, { bytes: hostPost }] };
}

/** A prefill step's routing: a warp a row, 8 rows a block. */
export function routeRowsLaunch(T: number, E: number, mode: RouteMode, route: Uint8Array): Launch {
  return { name: 'op_route_rows', grid: [Math.ceil(T / 8), 1, 1], block: 256, smem: routeRowsSmemBytes(mode, E), args: [{ bytes: route }] };
}

/** A prefill step's picks grouped by expert (and the tensor-core tiles), one block. */
export function groupLaunch(E: number, route: Uint8Array, groups: Uint8Array): Launch {
  return { name: 'op_group', grid: [1, 1, 1], block: 1024, smem: groupSmemBytes(E), args: [{ bytes: route }, { bytes: groups }] };
}

/** Each of `rows` rows' argmax keys over V logits, ARGMAX_BLOCKS blocks a row (and into mapped host memory at hostKeys, when given). */
export function argmaxLaunch(rows: number, a: { logits: bigint; V: number; keys: bigint; hostKeys: bigint }): Launch {
  return { name: 'op_argmax_rows', grid: [ARGMAX_BLOCKS, rows, 1], block: ARGMAX_THREADS, smem: 0, args: [u64(a.logits), i32(a.V), u64(a.keys), u64(a.hostKeys)] };
}

/** The latent attention's norms, RoPE and latent cache write of T rows of q_a | kv_a (lda floats a row). */
export function mlaNormRopeKvLaunch(T: number, a: { a: bigint; lda: number; rows: Uint8Array; m: MlaArgs }): Launch {
  return { name: 'op_mla_norm_rope_kv', grid: [T, 1, 1], block: 256, smem: 0, args: [u64(a.a), i32(a.lda), { bytes: a.rows }, { bytes: encodeMla(a.m) }] };
}

/**
 * T rows' queries absorbed into latent space, kv_b_proj read as `format` stores it. mla.cuh: MLA_QROWS = 8 rows a
 * block, MLA_QG = 2 slices of the nope dims.
 */
export function mlaQAbsorbLaunch(format: WeightFormat, T: number, a: { q: bigint; rows: Uint8Array; qlat: bigint; m: MlaArgs }): Launch {
  const m = a.m;
  return {
    name: `op_mla_q_absorb${format === 'fp8' ? '_fp8' : ''}`, grid: [m.nh, Math.ceil(T / 8), 1], block: 128, smem: 4 * (8 * m.nope + 2 * 8 * m.kvLora),
    args: [u64(a.q), { bytes: a.rows }, u64(a.qlat), { bytes: encodeMla(m) }, i32(T)],
  };
}

/** T rows' attention over the latent cache, a block per (row, head) of MLA_WARPS = 8 warps. */
export function mlaAttendLaunch(T: number, a: { qlat: bigint; rows: Uint8Array; olat: bigint; m: MlaArgs }): Launch {
  const m = a.m;
  return {
    name: 'op_mla_attend', grid: [T, m.nh, 1], block: 256, smem: 4 * (m.kvLora + m.rope + 8 * (m.kvLora + 2)),
    args: [u64(a.qlat), { bytes: a.rows }, u64(a.olat), { bytes: encodeMla(m) }],
  };
}

/** The values out of T rows' latent outputs, a warp a feature, kv_b_proj read as `format` stores it. */
export function mlaOAbsorbLaunch(format: WeightFormat, T: number, a: { olat: bigint; att: bigint; m: MlaArgs }): Launch {
  const m = a.m;
  return {
    name: `op_mla_o_absorb${format === 'fp8' ? '_fp8' : ''}`, grid: [Math.ceil((m.nh * m.vd) / 8), 1, 1], block: 256, smem: 0,
    args: [u64(a.olat), u64(a.att), { bytes: encodeMla(m) }, i32(T)],
  };
}

/** The host lane's exchange of a split expert's units (host_exchange.cuh), one block. */
export function hostExchangeLaunch(a: { mailbox: bigint; state: bigint; act: bigint; H: number; I: number }): Launch {
  return { name: 'op_host_exchange', grid: [1, 1, 1], block: 256, smem: 0, args: [u64(a.mailbox), u64(a.state), u64(a.act), i32(a.H), i32(a.I)] };
}

/** The host lane's picks brought into the partial rows (host_exchange.cuh), one block. */
export function hostCollectLaunch(a: { mailbox: bigint; state: bigint; partial: bigint; H: number }): Launch {
  return { name: 'op_host_collect', grid: [1, 1, 1], block: 256, smem: 0, args: [u64(a.mailbox), u64(a.state), u64(a.partial), i32(a.H)] };
}
