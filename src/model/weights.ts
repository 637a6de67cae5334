// Tensor views of a checkpoint: raw (as stored) and float32 or quantized matrices (as the CPU backend computes).
import type { Bf16Matrix, Matrix } from './quant.ts';
import type { TensorSource } from './tensor-source.ts';
import type { Int4Spec } from './int4-config.ts';

/**
 * Float dtypes convert to float32; U8 holds packed data (MXFP4 blocks and scales) and F8_E4M3 block-FP8
 * values, both kept as stored (quant.ts); I32 the 4-bit formats' packed words, zero points and group indices (and
 * I32 or I64 compressed-tensors' weight_shape), repacked at load (int4-repack.ts).
 */
export type DType = 'BF16' | 'F16' | 'F32' | 'U8' | 'F8_E4M3' | 'I32' | 'I64';

/** One tensor exactly as stored in the checkpoint: little-endian bytes, validated shape. */
export interface RawTensor {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

/** One expert's SwiGLU weights, row-major [out][in] as in the HF layout (float32, or quantized as stored). */
export interface ExpertWeights {
  readonly gate: Matrix; // [I][H]
  readonly up: Matrix; // [I][H]
  readonly down: Matrix; // [H][I]
  /** gpt-oss experts only: biases of gate [I], up [I] and down [H]. */
  readonly gateBias?: Float32Array;
  readonly upBias?: Float32Array;
  readonly downBias?: Float32Array;
  /**
   * A routed expert left in the checkpoint (loadModel's streamExperts): gate, up and down are empty, and a
   * backend reads these stored tensors straight into its own memory (the CPU banks: expert-rows.ts), so the
   * host never holds a second copy of the experts while the banks fill.
   */
  readonly stored?: StoredExpert;
}

/**
 * Where a streamed expert's tensors are: gate [I][H], up [I][H] and down [H][I] of `source` (float dtypes, or
 * block FP8 with their scales beside them).
 */
export interface StoredExpert {
  readonly source: TensorSource;
  readonly gate: string;
  readonly up: string;
  readonly down: string;
  /** bf16 tensors stay as stored in the bank row (bf16Policy 'stored'); else every float dtype is widened to float32. */
  readonly keepBf16: boolean;
  /**
   * The config's FP8 block shape (quant_method fp8): an F8_E4M3 tensor is kept as stored with its scales
   * (fp8ScaleName(name)) as a loaded one is (fp8Matrix). Absent: an F8_E4M3 tensor is refused.
   */
  readonly fp8Block?: readonly [number, number];
  /**
   * The config's 4-bit quantization (GPTQ, AWQ, compressed-tensors): a weight it stores in 4 bits is read from its
   * stored tensors (int4-tensors.ts) and repacked into the row as an Int4Matrix.
   */
  readonly int4?: Int4Spec;
}

export interface LayerWeights {
  readonly inputNorm: Float32Array; // [H]
  readonly qProj: Matrix; // [numHeads*headDim][H]
  readonly kProj: Matrix; // [numKvHeads*headDim][H]
  readonly vProj: Matrix; // [numKvHeads*headDim][H]
  readonly oProj: Matrix; // [H][numHeads*headDim]
  readonly qNorm: Float32Array; // [headDim]
  readonly kNorm: Float32Array; // [headDim]
  readonly postAttnNorm: Float32Array; // [H]
  readonly router: Float32Array; // [E][H]
  readonly experts: readonly ExpertWeights[]; // [E], indexed by expert id
  /**
   * Family extras (spec.ts says which family has which). A dense layer has no router and no experts
   * (empty), an MLA layer no q/k/v projections (empty).
   */
  readonly qBias?: Float32Array;
  readonly kBias?: Float32Array;
  readonly vBias?: Float32Array;
  readonly oBias?: Float32Array;
  readonly sinks?: Float32Array; // [numHeads]
  readonly routerBias?: Float32Array; // [E] (gpt-oss: added to the logits)
  readonly correctionBias?: Float32Array; // [E] (DeepSeek: e_score_correction_bias, for the choice only)
  readonly mla?: MlaWeights;
  /** The dense MLP of a layer without routed experts. */
  readonly dense?: ExpertWeights;
  /** The shared expert of an MoE layer. */
  readonly shared?: ExpertWeights;
}

/** DeepSeek-V3 multi-head latent attention projections (float32, or block FP8 as stored). */
export interface MlaWeights {
  readonly qA: Matrix; // [qLoraRank][H]
  readonly qANorm: Float32Array; // [qLoraRank]
  readonly qB: Matrix; // [numHeads*(nope+rope)][qLoraRank]
  readonly kvA: Matrix; // [kvLoraRank+rope][H]
  readonly kvANorm: Float32Array; // [kvLoraRank]
  readonly kvB: Matrix; // [numHeads*(nope+v)][kvLoraRank]
}

/**
 * The embedding or lm head [V][H]: float32, or bf16 kept as stored where the projections are (bf16Policy
 * 'stored': the embedding widens a row per token, the lm head runs the bf16-stored products).
 */
export type VocabMatrix = Float32Array | Bf16Matrix;

/**
 * The whole model as the CPU backend computes with it: float tensors converted once to float32 at load,
 * quantized linear weights (block FP8, MXFP4) kept as stored (quant.ts), and with bf16Policy 'stored' bf16
 * projections, experts, embedding and lm head as stored.
 */
export interface ModelWeights {
  readonly embed: VocabMatrix; // [V][H]
  readonly layers: readonly LayerWeights[];
  readonly finalNorm: Float32Array; // [H]
  /** [V][H]; the same array (or matrix) as `embed` when the embeddings are tied. */
  readonly lmHead: VocabMatrix;
  /**
   * The memory the bf16 matrices kept as stored were read into, when the load was given one (LoadOptions.bf16Memory:
   * the CPU backend's SIMD kernel memory, which a backend taking these weights adopts instead of copying them).
   */
  readonly bf16Memory?: Bf16Memory;
}

/** Memory for bf16 bit patterns kept as stored (the CPU kernel's arena). */
export interface Bf16Memory {
  /** Room for n bf16 values, or undefined when the memory would pass what it may hold (the load then uses the heap). */
  u16(n: number): Uint16Array | undefined;
}
