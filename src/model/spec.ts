// The model's shape as the engine and backends need it, parsed from a checkpoint's config.json.
import type { QuantSpec } from './quant-config.ts';

/** The model families the engine computes (config.json `model_type`). */
export type Architecture = 'qwen3_moe' | 'mixtral' | 'olmoe' | 'deepseek_v3' | 'gpt_oss';

/**
 * A model's geometry and numerics. The required fields describe a Qwen3-MoE model (every layer MoE,
 * per-head q/k norm, softmax router); the optional family fields, each absent for Qwen3-MoE, say where
 * another family differs. Only routed experts live in the banks: `moeLayers` lists the model layers
 * that have them, and banks, the counter table, maps and recorded routing index those layers in order.
 */
export interface ModelSpec {
  readonly architecture: Architecture;
  /** Name used in maps, counts dumps and the API (the checkpoint folder's name unless given). */
  readonly name: string;
  readonly vocabSize: number;
  readonly hiddenSize: number;
  readonly numLayers: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  /** Per-head width of q, k and v (with MLA: the RoPE part of q and k, see `mla`). */
  readonly headDim: number;
  /** Routed experts per MoE layer. */
  readonly numExperts: number;
  /** Experts picked per token per layer. */
  readonly topK: number;
  /** SwiGLU intermediate size of one routed expert. */
  readonly expertIntermediate: number;
  /** Renormalize the top-k router weights to sum to 1. */
  readonly normTopkProb: boolean;
  readonly rmsNormEps: number;
  readonly ropeTheta: number;
  /** lm_head shares the embedding matrix. */
  readonly tieWordEmbeddings: boolean;
  readonly maxPositions: number;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: readonly number[];

  /** Model layers with routed experts, ascending (absent: every layer). The others are dense MLP layers. */
  readonly moeLayers?: readonly number[];
  /** q/k RMSNorm: per head (absent, Qwen3), over the whole projection (OLMoE), or none. */
  readonly qkNorm?: 'head' | 'whole' | 'none';
  /** How the router picks and weighs experts (absent: softmax over all experts, top-k). */
  readonly router?: RouterSpec;
  /** RoPE beyond plain `ropeTheta` (absent: default RoPE over the whole head, rotate-half). */
  readonly rope?: RopeSpec;
  /** Biases on q/k/v/o (gpt-oss). */
  readonly attentionBias?: boolean;
  /** A learned sink logit per head joins every softmax (gpt-oss). */
  readonly attentionSinks?: boolean;
  /** Per model layer: attend to the last `n` positions only (0: full attention). Absent: all full. */
  readonly slidingWindows?: readonly number[];
  /** Multi-head latent attention (DeepSeek-V3) instead of q/k/v projections. */
  readonly mla?: MlaSpec;
  /** SwiGLU intermediate size of the dense MLP of layers not in `moeLayers`. */
  readonly denseIntermediate?: number;
  /** Intermediate size of the shared expert every token of an MoE layer also runs (0 or absent: none). */
  readonly sharedIntermediate?: number;
  /** The routed experts' activation (absent: SwiGLU without biases). */
  readonly expertAct?: ClampedSwiglu;
  /** How the checkpoint stores its linear weights (absent: float tensors only): block FP8 or MXFP4. */
  readonly quantization?: QuantSpec;
}

export type RouterSpec =
  /** softmax over all experts, top-k (renormalized when normTopkProb): Qwen3, Mixtral, OLMoE. */
  | { readonly kind: 'softmax_topk' }
  /** logits (+ bias), top-k, softmax over the k (gpt-oss). */
  | { readonly kind: 'topk_softmax'; readonly bias: boolean }
  /**
   * DeepSeek-V3 (noaux_tc): sigmoid scores; the choice adds e_score_correction_bias, keeps the best
   * `topkGroup` of `nGroup` groups (a group scored by the sum of its best two) and takes the top-k
   * there; the weights are the unbiased scores (renormalized when normTopkProb) x scalingFactor.
   */
  | { readonly kind: 'sigmoid_group'; readonly nGroup: number; readonly topkGroup: number; readonly scalingFactor: number };

export interface RopeSpec {
  /** Pairs (2i, 2i+1) rotate instead of (i, i + d/2) (DeepSeek's rope_interleave). */
  readonly interleaved: boolean;
  readonly yarn?: YarnSpec;
}

/** YaRN as transformers computes it (`_compute_yarn_parameters`). */
export interface YarnSpec {
  readonly factor: number;
  readonly originalMaxPositions: number;
  readonly betaFast: number;
  readonly betaSlow: number;
  readonly truncate: boolean;
  /** cos and sin are multiplied by this. */
  readonly attentionFactor: number;
}

export interface MlaSpec {
  readonly qLoraRank: number;
  readonly kvLoraRank: number;
  /** Per head: q/k width without RoPE; with `headDim` (the RoPE part, k's shared by every head) the q/k width. */
  readonly qkNopeDim: number;
  readonly vHeadDim: number;
  /**
   * The attention's softmax scale (transformers' DeepseekV3Attention.scaling): (qkNopeDim + headDim)^-0.5, times
   * yarnMscale(factor, mscale_all_dim)^2 under DeepSeek's YaRN.
   */
  readonly softmaxScale: number;
}

/** gpt-oss experts: gate and up with biases, clamped, (up + 1) * gate * sigmoid(alpha gate), down with bias. */
export interface ClampedSwiglu {
  readonly kind: 'clamped_swiglu';
  readonly limit: number;
  readonly alpha: number;
}

/** Model layers with routed experts, ascending. */
export function moeLayerIds(spec: ModelSpec): readonly number[] {
  return spec.moeLayers ?? Array.from({ length: spec.numLayers }, (_, l) => l);
}

/** How many layers have routed experts: the layer count of banks, counter tables, maps and routing. */
export function moeLayerCount(spec: ModelSpec): number {
  return spec.moeLayers?.length ?? spec.numLayers;
}
