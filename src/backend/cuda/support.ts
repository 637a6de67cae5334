// Which models the CUDA kernels compute correctly, checked from the spec before anything touches the device, so an
// unsupported checkpoint is refused with its reason instead of failing (or silently computing something else) deep
// inside a kernel.
import { ResidencyError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { isInt4 } from '../../model/quant-config.ts';

export function checkCudaSupport(s: ModelSpec): void {
  const refuse = (why: string): never => {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: ${why}; use --backend cpu`);
  };
  // Block FP8 and MXFP4 are computed as stored (device-weights.ts); MXFP4 in gpt-oss's expert layout.
  if (isInt4(s.quantization)) refuse(`4-bit ${s.quantization.method} weights are not on CUDA yet`);
  if (s.quantization?.method === 'mxfp4' && s.architecture !== 'gpt_oss') refuse(`MXFP4 experts of ${s.architecture} (the kernels read gpt-oss's *_blocks / *_scales layout)`);
  if (s.quantization?.method === 'fp8' && s.quantization.blockSize[1] % 32 !== 0) {
    refuse(`FP8 blocks of [${s.quantization.blockSize.join(', ')}] (quantization_config.weight_block_size): the kernels take block columns that are a multiple of 32`);
  }
  // Mixtral is Qwen3-MoE's layer without q/k norms, its router softmax then top-k renormalized (normTopkProb);
  // OLMoE's norms q and k over the whole projections and does not renormalize;
  // gpt-oss adds biases, sinks, sliding windows, YaRN, a top-k-then-softmax router and clamped SwiGLU experts;
  // DeepSeek-V3 has multi-head latent attention (mla.cuh), dense layers first, a shared expert and the
  // group-limited sigmoid router.
  const families = ['qwen3_moe', 'mixtral', 'olmoe', 'gpt_oss', 'deepseek_v3'];
  if (!families.includes(s.architecture)) refuse(`architecture ${s.architecture} is not implemented on CUDA yet (${families.join(', ')} only)`);
  const router = s.router;
  if (router?.kind === 'sigmoid_group' && router.nGroup > 32) refuse(`n_group ${router.nGroup} (the routing kernel scores at most 32 groups)`);
  if (s.architecture === 'gpt_oss' && s.quantization?.method !== 'mxfp4') refuse('gpt-oss experts not in MXFP4');
  const m = s.mla;
  if (m) {
    // The absorbed form's kernels: a latent row in the registers of a warp (kv_lora <= 512, 32 a lane step).
    if (m.kvLoraRank % 32 !== 0 || m.kvLoraRank > 512) refuse(`kv_lora_rank ${m.kvLoraRank} (the latent attention kernels take a multiple of 32, at most 512)`);
    if (m.qLoraRank % 32 !== 0) refuse(`q_lora_rank ${m.qLoraRank} is not a multiple of 32`);
    // op_mla_q_absorb stages 8 rows of q_nope and two partial latent rows per row in 48 KiB of shared memory.
    if (m.qkNopeDim > 512) refuse(`qk_nope_head_dim ${m.qkNopeDim} (the latent attention kernels take at most 512)`);
    // op_mla_norm_rope_kv stages the rotated k_rope in shared memory before it joins the cache (mla.cuh MLA_MAX_ROPE).
    if (s.headDim > 256) refuse(`qk_rope_head_dim ${s.headDim} (the latent attention kernels take at most 256)`);
    if ((s.numHeads * m.vHeadDim) % 32 !== 0) refuse(`num_heads x v_head_dim ${s.numHeads * m.vHeadDim} is not a multiple of 32`);
  } else {
    if (s.rope?.interleaved) refuse('interleaved RoPE outside multi-head latent attention (the attention kernels rotate halves)');
    if ((s.numHeads * s.headDim) % 32 !== 0) refuse(`num_heads x head_dim ${s.numHeads * s.headDim} is not a multiple of 32`);
    if (![32, 64, 128].includes(s.headDim)) refuse(`head_dim ${s.headDim} (the attention kernels take 32, 64 or 128)`);
    if (s.numHeads % s.numKvHeads !== 0) refuse(`${s.numHeads} heads are not a multiple of ${s.numKvHeads} kv heads`);
    const G = s.numHeads / s.numKvHeads;
    if (![1, 2, 4, 8, 16].includes(G)) refuse(`${G} query heads per kv head (the attention kernels take 1, 2, 4, 8 or 16)`);
  }
  // The tensor-core tiles read K in slices of 32; the gemv reads 16-byte pieces.
  // bf16 routed experts narrower than that are padded with zero units at upload (weights/pad-experts.ts).
  const widths: [string, number | undefined][] = [['hidden_size', s.hiddenSize], ['moe_intermediate_size', s.quantization ? s.expertIntermediate : undefined],
    ['intermediate_size (the dense layers)', s.denseIntermediate], ['the shared experts\' intermediate size', s.sharedIntermediate]];
  for (const [what, v] of widths) if (v !== undefined && v % 32 !== 0) refuse(`${what} ${v} is not a multiple of 32`);
  if (s.numExperts > 1024) refuse(`${s.numExperts} experts per layer (at most 1024)`);
  if (s.topK > 32) refuse(`top-${s.topK} routing (at most 32)`);
  if (s.hiddenSize > 16384) refuse(`hidden_size ${s.hiddenSize} (at most 16384: a row's norm sits in shared memory)`);
}
