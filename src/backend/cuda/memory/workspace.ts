// What the CUDA backend holds on the device, counted before anything is allocated: the resident weights (the
// non-expert tensors and the hot bank, as stored: bf16 or block FP8 with its scales), the KV cache per position, and the work buffers of
// one piece. planMemory checks the sum against the budget; the backend allocates exactly these buffers.
import { moeLayerCount, type ModelSpec } from '../../../model/spec.ts';
import type { MemoryNeeds } from './memory.ts';
import type { DeviceWeightBytes } from '../weights/device-weights.ts';
import { maxGroupedTiles, stepLayout } from '../step/kernel-args.ts';
import { DECODE_MAX_ROWS } from '../step/plan.ts';

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

/** KV cache bytes of one position of one sequence: every layer's k and v (fp32), or latent attention's c | k_rope. */
export function kvBytesPerPosition(s: ModelSpec): number {
  const m = s.mla;
  return s.numLayers * 4 * (m ? m.kvLoraRank + s.headDim : 2 * s.numKvHeads * s.headDim);
}

/** The memory plan's inputs for a model with `hotPerLayer` experts of each MoE layer in HBM (`w`: its weights' device bytes as stored). */
export function memoryNeeds(s: ModelSpec, hotPerLayer: number, T: number, maxSplits: number, w: DeviceWeightBytes): MemoryNeeds {
  const weights = w.resident + moeLayerCount(s) * hotPerLayer * w.expertRow;
  const work = workspaceLayout(s, T, maxSplits).reduce((a, [, b]) => a + b, 0) + stepLayout(T).bytes;
  return { weights, kvPerPosition: kvBytesPerPosition(s), workspace: work };
}
