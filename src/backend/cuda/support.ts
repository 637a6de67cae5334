// Which model shapes the CUDA kernels compute correctly: checked from the spec before anything touches the
// device, so an unsupported checkpoint is refused with its reason instead of failing (or silently computing
// something else) deep inside a kernel.
import { ResidencyError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { decodeLayersSmemBytes, rowSmemBytes, type ModelDims } from './layout.ts';

/** Shared memory one block may use on Hopper (227 KiB opt-in). */
export const MAX_BLOCK_SMEM = 227 * 1024;

/** The kernels' shape limits; `rowThreads` is the block size of one decode row, `ffnThreads` of expert_ffn. */
export function checkCudaSupport(s: ModelSpec, rowThreads: number, ffnThreads: number, fused = false): void {
  const refuse = (why: string): never => {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: ${why}; use --backend cpu`);
  };
  if (s.quantization) refuse(`quantized checkpoints (quant_method ${s.quantization.method}) are not computed on CUDA yet`);
  // The row path's fused layer is Qwen3-MoE's; other families take the op path (op/support.ts).
  if (s.architecture !== 'qwen3_moe') refuse(`architecture ${s.architecture} on the row path (qwen3_moe only)`);
  if (![128, 256, 512, 1024].includes(rowThreads)) {
    throw new ResidencyError('BAD_ARGUMENT', `rowThreads ${rowThreads}: expected 128, 256, 512 or 1024`);
  }
  if (s.hiddenSize % 8 !== 0 || s.expertIntermediate % 8 !== 0 || s.headDim % 8 !== 0) {
    refuse(`hidden (${s.hiddenSize}), expert intermediate (${s.expertIntermediate}) and head_dim (${s.headDim}) must be divisible by 8`);
  }
  if (s.numHeads % s.numKvHeads !== 0) refuse(`${s.numHeads} heads are not a multiple of ${s.numKvHeads} kv heads`);
  if (s.numExperts > 1024) refuse(`${s.numExperts} experts per layer (at most 1024)`);
  if (s.expertIntermediate > ffnThreads) refuse(`expert intermediate ${s.expertIntermediate} is over ${ffnThreads} (one thread per row)`);
  // The attention softmax runs a warp per head.
  if (s.numHeads > rowThreads / 32) refuse(`${s.numHeads} attention heads need more than ${rowThreads / 32} warps per row`);
  const dims: ModelDims = {
    H: s.hiddenSize, nh: s.numHeads, nkv: s.numKvHeads, hd: s.headDim, E: s.numExperts, K: s.topK, I: s.expertIntermediate,
    V: s.vocabSize, L: s.numLayers, normTopk: s.normTopkProb, hotRows: s.numExperts, maxPos: s.maxPositions,
    eps: s.rmsNormEps, theta: s.ropeTheta,
  };
  const smem = fused ? decodeLayersSmemBytes(dims, rowThreads) : rowSmemBytes(dims, rowThreads);
  if (smem > MAX_BLOCK_SMEM) {
    refuse(`a decode row needs ${Math.ceil(smem / 1024)} KiB of shared memory (attention scores for ${s.maxPositions} positions); the limit is ${MAX_BLOCK_SMEM / 1024} KiB`);
  }
}
