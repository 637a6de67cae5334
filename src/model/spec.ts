// The model's shape as the engine and backends need it, parsed from a checkpoint's config.json.

/** A Qwen3-MoE model's geometry and numerics. Every layer is an MoE layer (no dense MLP layers). */
export interface ModelSpec {
  readonly architecture: 'qwen3_moe';
  /** Name used in maps, counts dumps and the API (the checkpoint folder's name unless given). */
  readonly name: string;
  readonly vocabSize: number;
  readonly hiddenSize: number;
  readonly numLayers: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly numExperts: number;
  /** Experts picked per token per layer. */
  readonly topK: number;
  /** SwiGLU intermediate size of one expert. */
  readonly expertIntermediate: number;
  /** Renormalize the top-k router probabilities to sum to 1. */
  readonly normTopkProb: boolean;
  readonly rmsNormEps: number;
  readonly ropeTheta: number;
  /** lm_head shares the embedding matrix. */
  readonly tieWordEmbeddings: boolean;
  readonly maxPositions: number;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: readonly number[];
}
