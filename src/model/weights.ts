// Tensor views of a checkpoint: raw (as stored) and float32 (as the CPU backend computes).

export type DType = 'BF16' | 'F16' | 'F32';

/** One tensor exactly as stored in the checkpoint: little-endian bytes, validated shape. */
export interface RawTensor {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

/** One expert's SwiGLU weights, row-major [out][in] as in the HF layout. */
export interface ExpertWeights {
  readonly gate: Float32Array; // [I][H]
  readonly up: Float32Array; // [I][H]
  readonly down: Float32Array; // [H][I]
}

export interface LayerWeights {
  readonly inputNorm: Float32Array; // [H]
  readonly qProj: Float32Array; // [numHeads*headDim][H]
  readonly kProj: Float32Array; // [numKvHeads*headDim][H]
  readonly vProj: Float32Array; // [numKvHeads*headDim][H]
  readonly oProj: Float32Array; // [H][numHeads*headDim]
  readonly qNorm: Float32Array; // [headDim]
  readonly kNorm: Float32Array; // [headDim]
  readonly postAttnNorm: Float32Array; // [H]
  readonly router: Float32Array; // [E][H]
  readonly experts: readonly ExpertWeights[]; // [E], indexed by expert id
}

/** The whole model in float32, converted once at load. */
export interface ModelWeights {
  readonly embed: Float32Array; // [V][H]
  readonly layers: readonly LayerWeights[];
  readonly finalNorm: Float32Array; // [H]
  /** [V][H]; the same array as `embed` when the embeddings are tied. */
  readonly lmHead: Float32Array;
}
