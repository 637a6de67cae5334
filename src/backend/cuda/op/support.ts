// Which model shapes the op path's kernels compute correctly, checked from the spec before anything touches
// the device (the row path has its own, tighter limits in ../support.ts).
import { ResidencyError } from '../../../errors.ts';
import type { ModelSpec } from '../../../model/spec.ts';

export function checkOpSupport(s: ModelSpec): void {
  const refuse = (why: string): never => {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: ${why}; use --backend cpu`);
  };
  // Block FP8 and MXFP4 are computed as stored (device-weights.ts); MXFP4 in gpt-oss's expert layout.
  if (s.quantization?.method === 'mxfp4' && s.architecture !== 'gpt_oss') refuse(`MXFP4 experts of ${s.architecture} (the kernels read gpt-oss's *_blocks / *_scales layout)`);
  if (s.quantization?.method === 'fp8' && s.quantization.blockSize[1] % 32 !== 0) {
    refuse(`FP8 blocks of [${s.quantization.blockSize.join(', ')}] (quantization_config.weight_block_size): the kernels take block columns that are a multiple of 32`);
  }
  // Mixtral is Qwen3-MoE's layer without q/k norms, its router softmax then top-k renormalized (normTopkProb);
  // OLMoE's norms q and k over the whole projections and does not renormalize;
  // gpt-oss adds biases, sinks, sliding windows, YaRN, a top-k-then-softmax router and clamped SwiGLU experts.
  const families = ['qwen3_moe', 'mixtral', 'olmoe', 'gpt_oss'];
  if (!families.includes(s.architecture)) refuse(`architecture ${s.architecture} is not implemented on CUDA yet (${families.join(', ')} only)`);
  if (s.router !== undefined && s.router.kind !== 'softmax_topk' && s.router.kind !== 'topk_softmax') refuse(`router ${s.router.kind} (the routing kernel takes softmax then top-k, or top-k then softmax)`);
  if (s.rope?.interleaved) refuse('interleaved RoPE (the attention kernels rotate halves)');
  if (s.mla) refuse('multi-head latent attention');
  if (s.moeLayers !== undefined && s.moeLayers.length !== s.numLayers) refuse('dense MLP layers (every layer must be MoE)');
  if (s.sharedIntermediate) refuse('shared experts');
  if (s.architecture === 'gpt_oss' && s.quantization?.method !== 'mxfp4') refuse('gpt-oss experts not in MXFP4');
  const QD = s.numHeads * s.headDim;
  // The tensor-core tiles read K in slices of 32; the gemv reads 16-byte pieces.
  for (const [what, v] of [['hidden_size', s.hiddenSize], ['num_heads x head_dim', QD], ['moe_intermediate_size', s.expertIntermediate]] as const) {
    if (v % 32 !== 0) refuse(`${what} ${v} is not a multiple of 32`);
  }
  if (![32, 64, 128].includes(s.headDim)) refuse(`head_dim ${s.headDim} (the attention kernels take 32, 64 or 128)`);
  if (s.numHeads % s.numKvHeads !== 0) refuse(`${s.numHeads} heads are not a multiple of ${s.numKvHeads} kv heads`);
  const G = s.numHeads / s.numKvHeads;
  if (![1, 2, 4, 8, 16].includes(G)) refuse(`${G} query heads per kv head (the attention kernels take 1, 2, 4, 8 or 16)`);
  if (s.numExperts > 1024) refuse(`${s.numExperts} experts per layer (at most 1024)`);
  if (s.topK > 32) refuse(`top-${s.topK} routing (at most 32)`);
  if (s.hiddenSize > 16384) refuse(`hidden_size ${s.hiddenSize} (at most 16384: a row's norm sits in shared memory)`);
}
