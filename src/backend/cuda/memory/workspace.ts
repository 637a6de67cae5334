// What the CUDA backend holds on the device, counted before anything is allocated: the resident weights (the
// non-expert tensors and the hot bank, as stored: bf16 or block FP8 with its scales), a KV block's bytes, and the work
// buffers of one piece. planMemory sizes the pool from the rest; the backend allocates exactly these buffers.
import { moeLayerCount, type ModelSpec } from '../../../model/spec.ts';
import type { MemoryNeeds } from './memory.ts';
import type { DeviceWeightBytes } from '../weights/device-weights.ts';
import { maxGroupedTiles, stepLayout } from '../step/kernel-args.ts';
import { DECODE_MAX_ROWS } from '../step/plan.ts';
import type { KvCacheDtype } from '../../backend.ts';
import { KV_DTYPE_BYTES } from '../../kv-dtype.ts';

/** Rows whose logits one piece computes at most (the LM head's gather). */
export const MAX_OUT = 16;
/** Blocks a row of op_argmax_rows (each writes one key; the host takes a row's best). */
export const ARGMAX_BLOCKS = 32;

/** The work buffers of a piece of T rows (name -> bytes); `maxSplits` sizes the attention partials. */
export function workspaceLayout(s: ModelSpec, T: number, maxSplits: number): [string, number][] {
  const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd, numExperts: E, topK: K, expertIntermediate: I, vocabSize: V } = s;
  const LK = moeLayerCount(s) * K;
  const tiles = maxGroupedTiles(T * K, E);
  const m = s.mla;
  // Latent attention (mla.cuh): q_a | kv_a's output, q, the latent queries and outputs; no q | k | v.
  const attention: [string, number][] = m
    ? [['qkv', 16], ['att', 4 * T * nh * m.vHeadDim], ['mlaA', 4 * T * (m.qLoraRank + m.kvLoraRank + hd)], ['mlaQ', 4 * T * nh * (m.qkNopeDim + hd)],
      ['mlaQLat', 4 * T * nh * (m.kvLoraRank + hd)], ['mlaOLat', 4 * T * nh * m.kvLoraRank]]
    : [['qkv', 4 * T * (nh + 2 * nkv) * hd], ['att', 4 * T * nh * hd], ['attnPart', 4 * DECODE_MAX_ROWS * nh * maxSplits * (hd + 2)]];
  // The SwiGLU units of a dense layer's MLP or a shared expert.
  const mlpI = Math.max(s.denseIntermediate ?? 0, s.sharedIntermediate ?? 0);
  return [
    ['hidden', 4 * T * H], ['xn', 4 * T * H], ...attention, ['rlog', 4 * T * E],
    ['pickE', 4 * T * LK], ['pickW', 4 * T * LK], ['pickSlot', 4 * T * K],
    ['grpN', 16], ['grpSlot', 4 * E], ['grpStart', 4 * (E + 1)], ['grpRows', 4 * T * K], ['tileN', 16], ['tileGroup', 4 * tiles], ['tileRow0', 4 * tiles],
    ['act', 4 * T * K * I], ['partial', 4 * T * K * H],
    ...(mlpI > 0 ? [['mlpAct', 4 * T * mlpI] as [string, number]] : []),
    ['xf', 4 * MAX_OUT * H], ['logits', 4 * MAX_OUT * V], ['argmaxKeys', 8 * MAX_OUT * ARGMAX_BLOCKS],
  ];
}

/** Values one position of one layer takes in the KV pool: k and v of every kv head, or latent attention's c | k_rope. */
export function kvWidth(s: ModelSpec): number {
  const m = s.mla;
  return m ? m.kvLoraRank + s.headDim : 2 * s.numKvHeads * s.headDim;
}

/** Bytes of one KV block: every layer's keys and values of `blockSize` positions, in `dtype`. */
export function kvBytesPerBlock(s: ModelSpec, blockSize: number, dtype: KvCacheDtype): number {
  return s.numLayers * blockSize * kvWidth(s) * KV_DTYPE_BYTES[dtype];
}

/** The pool and step rows' shape: blocks of `blockSize` positions, the most blocks a row's table holds. */
export interface KvShape { readonly blockSize: number; readonly dtype: KvCacheDtype; readonly maxBlocks: number }

/**
 * The memory plan's inputs for a model with `hotPerLayer` experts of each MoE layer in HBM (`w`: its weights' device
 * bytes as stored), pieces of up to T rows and the KV shape `kv`.
 */
export function memoryNeeds(s: ModelSpec, hotPerLayer: number, T: number, maxSplits: number, w: DeviceWeightBytes, kv: KvShape): MemoryNeeds {
  const weights = w.resident + moeLayerCount(s) * hotPerLayer * w.expertRow;
  const work = workspaceLayout(s, T, maxSplits).reduce((a, [, b]) => a + b, 0) + stepLayout(T, kv.maxBlocks).bytes;
  return { weights, workspace: work, bytesPerBlock: kvBytesPerBlock(s, kv.blockSize, kv.dtype), blockSize: kv.blockSize };
}
