// Which model shapes the op path's kernels compute correctly, checked from the spec before anything touches
// the device (the row path has its own, tighter limits in ../support.ts).
import { ResidencyError } from '../../../errors.ts';
import type { ModelSpec } from '../../../model/spec.ts';

export function checkOpSupport(s: ModelSpec): void {
  const refuse = (why: string): never => {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: ${why}; use --backend cpu`);
  };
  // Block FP8 is computed as stored (device-weights.ts); MXFP4 not yet.
  if (s.quantization?.method === 'mxfp4') refuse('MXFP4 checkpoints (quant_method mxfp4) are not computed on CUDA yet');
  if (s.quantization?.method === 'fp8' && s.quantization.blockSize[1] % 32 !== 0) {
    refuse(`FP8 blocks of [${s.quantization.blockSize.join(', ')}] (quantization_config.weight_block_size): the kernels take block columns that are a multiple of 32`);
  }
  // Mixtral is Qwen3-MoE's layer without q/k norms, its router softmax then top-k renormalized (normTopkProb).
  if (s.architecture !== 'qwen3_moe' && s.architecture !== 'mixtral') refuse(`architecture ${s.architecture} is not implemented on CUDA yet (qwen3_moe and mixtral only)`);
  if (s.qkNorm !== undefined && s.qkNorm !== 'head' && s.qkNorm !== 'none') refuse(`q/k norm over the ${s.qkNorm} projection (the attention kernels norm each head or none)`);
  if (s.router !== undefined && s.router.kind !== 'softmax_topk') refuse(`router ${s.router.kind} (the routing kernel takes softmax then top-k)`);
  const QD = s.numHeads * s.headDim;
  // The tensor-core tiles read K in slices of 32; the gemv reads 16-byte pieces.
  for (const [what, v] of [['hidden_size', s.hiddenSize], ['num_heads x head_dim', QD], ['moe_intermediate_size', s.expertIntermediate]] as const) {
    if (v % 32 !== 0) refuse(`${what} ${v} is not a multiple of 32`);
  }
  if (s.headDim !== 64 && s.headDim !== 128) refuse(`head_dim ${s.headDim} (the attention kernels take 64 or 128)`);
  if (s.numHeads % s.numKvHeads !== 0) refuse(`${s.numHeads} heads are not a multiple of ${s.numKvHeads} kv heads`);
  const G = s.numHeads / s.numKvHeads;
  if (![1, 2, 4, 8, 16].includes(G)) refuse(`${G} query heads per kv head (the attention kernels take 1, 2, 4, 8 or 16)`);
  if (s.numExperts > 1024) refuse(`${s.numExperts} experts per layer (at most 1024)`);
  if (s.topK > 32) refuse(`top-${s.topK} routing (at most 32)`);
  if (s.hiddenSize > 16384) refuse(`hidden_size ${s.hiddenSize} (at most 16384: a row's norm sits in shared memory)`);
}
