// What the op path holds on the device, counted before anything is allocated: the resident weights (the
// non-expert tensors and the hot bank, as stored: bf16 or block FP8 with its scales), the KV cache per position, and the work buffers of
// one piece. planMemory checks the sum against the budget; the backend allocates exactly these buffers.
import type { ModelSpec } from '../../../model/spec.ts';
import type { MemoryNeeds } from './memory.ts';
import type { DeviceWeightBytes } from '../device-weights.ts';
import { maxGroupedTiles, stepLayout } from './layout.ts';
import { DECODE_MAX_ROWS } from './plan.ts';

/** Rows whose logits one piece computes at most (the LM head's gather). */
export const MAX_OUT = 16;

/** The work buffers of a piece of T rows (name -> bytes); `maxSplits` sizes the attention partials. */
export function workspaceLayout(s: ModelSpec, T: number, maxSplits: number): [string, number][] {
  const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd, numExperts: E, topK: K, expertIntermediate: I, vocabSize: V, numLayers: L } = s;
  const QKV = (nh + 2 * nkv) * hd;
  const tiles = maxGroupedTiles(T * K, E);
  return [
    ['hidden', 4 * T * H], ['xn', 4 * T * H], ['qkv', 4 * T * QKV], ['att', 4 * T * nh * hd], ['rlog', 4 * T * E],
    ['pickE', 4 * T * L * K], ['pickW', 4 * T * L * K], ['pickSlot', 4 * T * K],
    ['grpN', 16], ['grpExpert', 4 * E], ['grpStart', 4 * (E + 1)], ['grpRows', 4 * T * K], ['tileN', 16], ['tileGroup', 4 * tiles], ['tileRow0', 4 * tiles],
    ['act', 4 * T * K * I], ['partial', 4 * T * K * H],
    ['attnPart', 4 * DECODE_MAX_ROWS * nh * maxSplits * (hd + 2)],
    ['xf', 4 * MAX_OUT * H], ['logits', 4 * MAX_OUT * V],
  ];
}

/** The memory plan's inputs for a model with `hotPerLayer` experts of each layer in HBM (`w`: its weights' device bytes as stored). */
export function memoryNeeds(s: ModelSpec, hotPerLayer: number, T: number, maxSplits: number, w: DeviceWeightBytes): MemoryNeeds {
  const KD = s.numKvHeads * s.headDim;
  const weights = w.resident + s.numLayers * hotPerLayer * w.expertRow;
  const work = workspaceLayout(s, T, maxSplits).reduce((a, [, b]) => a + b, 0) + stepLayout(T).bytes;
  return { weights, kvPerPosition: s.numLayers * 2 * KD * 4, workspace: work };
}
