// The weights outside the banks, uploaded as stored: the embedding, each layer's norms, attention
// products (q | k | v stacked, or DeepSeek-V3's latent attention: q_a | kv_a stacked, q_b, kv_b, o) and router,
// gpt-oss's biases and sinks, DeepSeek-V3's dense MLPs, shared experts and router correction bias, the final
// norm and the LM head, and RoPE's inverse frequencies (the spec's numbers, as the CPU computes them).
import { ResidencyError } from '../../../errors.ts';
import { moeLayerIds, type ModelSpec } from '../../../model/spec.ts';
import type { TensorSource } from '../../../model/tensor-source.ts';
import type { DType } from '../../../model/weights.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames, moeTensorNames } from '../../../model/architecture.ts';
import { deepseekV3Names } from '../../../model/families/deepseek-v3.ts';
import { tensorToFloat32 } from '../../../model/float-convert.ts';
import { ropeFrequencies } from '../../cpu/family-attention.ts';
import { align16, attentionProducts, layerExtras, mlaProducts, mlpProducts, productBytes, type ProductWeights } from './device-weights.ts';
import type { CudaDriver } from '../driver/driver.ts';
import type { TensorUploader } from './uploader.ts';

/** A dense product on the device: its values, its scale grid (fp8), and how they are stored. */
export interface DenseDev { w: bigint; grid: bigint; p: ProductWeights }

/** DeepSeek-V3's latent attention: q_a | kv_a (one product), their norms, q_b, kv_b as stored (mla.cuh's absorb kernels read it). */
export interface MlaDev { a: DenseDev; qANorm: bigint; kvANorm: bigint; qB: DenseDev; kvB: DenseDev }

/** A SwiGLU MLP outside the banks (a dense layer's, or an MoE layer's shared expert): gate | up, down. */
export interface MlpDev { gateUp: DenseDev; down: DenseDev; I: number }

export interface LayerDev {
  inNorm: bigint; o: DenseDev; postNorm: bigint;
  /** q | k | v and their norms (0n: none); absent with latent attention. */
  qkv?: DenseDev; qNorm: bigint; kNorm: bigint;
  mla?: MlaDev;
  /** The router (0n on a dense layer) and this layer's index among the MoE layers (banks, counter, routing; -1: dense). */
  router: bigint; moe: number;
  /** A dense layer's MLP, or the shared expert beside an MoE layer's routed ones. */
  mlp?: MlpDev;
  /** DeepSeek-V3: e_score_correction_bias as float32 [E] (0n: none). */
  choiceBias: bigint;
  /** gpt-oss (0n: none): q | k | v and o biases, a sink logit per head, the router's bias; and the sliding window (0: full). */
  qkvBias: bigint; oBias: bigint; sinks: bigint; routerBias: bigint; window: number;
}

export interface ResidentWeights {
  embed: bigint; finalNorm: bigint; lmHead: bigint; layers: LayerDev[];
  /** RoPE's inverse frequencies [hd / 2] (ropeFrequencies) and the factor on cos and sin. */
  invFreq: bigint; ropeScale: number;
}

/** Uploads them all; `alloc` takes device memory its owner releases. */
export function uploadResidentWeights(d: CudaDriver, spec: ModelSpec, source: TensorSource, uploader: TensorUploader, alloc: (bytes: number, what: string) => bigint): ResidentWeights {
  const s = spec;
  const up = (name: string): bigint => {
    const p = alloc(uploader.expectBf16(name), name);
    uploader.toDevice(name, p);
    return p;
  };
  const opt = (name: string | undefined): bigint => (name === undefined ? 0n : up(name));
  // A dense product: its stacked matrices' values, then (fp8) its scale grid 16-byte aligned after them.
  const dense = (p: ProductWeights, what: string): DenseDev => {
    const w = alloc(productBytes(p), what);
    const grid = p.grid ? w + BigInt(align16(p.dataBytes)) : 0n;
    uploader.productToDevice(p, w, grid);
    return { w, grid, p };
  };
  // Several bf16 tensors back to back in one allocation (q | k | v biases).
  const upConcat = (names: readonly string[], what: string): bigint => {
    if (names.length === 0) return 0n;
    const sizes = names.map((name) => uploader.expectBf16(name));
    const p = alloc(sizes.reduce((a, b) => a + b, 0), what);
    let at = 0;
    names.forEach((name, i) => { uploader.toDevice(name, p + BigInt(at), sizes[i]); at += sizes[i]!; });
    return p;
  };
  // A float tensor as float32 on the device (DeepSeek's correction bias: bf16 or f32 in checkpoints), checked finite.
  const upF32 = (name: string): bigint => {
    const t = source.info(name);
    if (t.dtype !== 'BF16' && t.dtype !== 'F32') throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: tensor ${name} is ${t.dtype}: expected BF16 or F32; use --backend cpu`);
    const bytes = new Uint8Array(t.bytes);
    source.read(name, bytes);
    const f = tensorToFloat32({ name, dtype: t.dtype as DType, shape: t.shape, bytes }, { finite: true });
    const p = alloc(4 * f.length, name);
    d.htod(p, new Uint8Array(f.buffer, f.byteOffset, f.byteLength));
    return p;
  };
  const mlp = (names: { gate: string; up: string; down: string }, I: number, what: string): MlpDev => {
    const p = mlpProducts(source, s, names, I);
    return { gateUp: dense(p.gateUp, `${what} gate | up`), down: dense(p.down, `${what} down`), I };
  };
  const embed = up(EMBED);
  const layers: LayerDev[] = [];
  const moeIndex = new Map(moeLayerIds(s).map((l, i) => [l, i]));
  for (let l = 0; l < s.numLayers; l++) {
    const n = layerTensorNames(l);
    const moe = moeIndex.get(l) ?? -1;
    const x = layerExtras(s, l);
    const common = {
      inNorm: up(n.inputNorm), postNorm: up(n.postAttnNorm), moe,
      qkvBias: upConcat(x.qkvBias, `q/k/v biases layer ${l}`), oBias: opt(x.oBias), sinks: opt(x.sinks), routerBias: opt(x.routerBias),
      window: s.slidingWindows?.[l] ?? 0,
    };
    let attention: Pick<LayerDev, 'qkv' | 'qNorm' | 'kNorm' | 'mla' | 'o'>;
    if (s.mla) {
      const dn = deepseekV3Names(l);
      const a = mlaProducts(source, s, l);
      attention = {
        qNorm: 0n, kNorm: 0n, o: dense(a.o, `o_proj layer ${l}`),
        mla: { a: dense(a.a, `q_a | kv_a layer ${l}`), qANorm: up(dn.qANorm), kvANorm: up(dn.kvANorm), qB: dense(a.qB, `q_b_proj layer ${l}`), kvB: dense(a.kvB, `kv_b_proj layer ${l}`) },
      };
    } else {
      const a = attentionProducts(source, s, l);
      // Families without q/k norms (mixtral, gpt-oss): null norm weights, which the attention kernels skip.
      // OLMoE's norm the whole projections ([nh x hd], [nkv x hd]) in their own launch (the backend's enqueue).
      const qk = s.qkNorm === 'none' ? { qNorm: 0n, kNorm: 0n } : { qNorm: up(n.qNorm), kNorm: up(n.kNorm) };
      attention = { qkv: dense(a.qkv, `qkv layer ${l}`), o: dense(a.o, `o_proj layer ${l}`), ...qk };
    }
    let ffn: Pick<LayerDev, 'router' | 'mlp' | 'choiceBias'>;
    if (moe < 0) {
      ffn = { router: 0n, choiceBias: 0n, mlp: mlp(deepseekV3Names(l).dense, s.denseIntermediate!, `dense MLP layer ${l}`) };
    } else {
      const shared = s.sharedIntermediate ? { mlp: mlp(deepseekV3Names(l).shared, s.sharedIntermediate, `shared expert layer ${l}`) } : {};
      ffn = { router: up(moeTensorNames(s, l).router), choiceBias: s.router?.kind === 'sigmoid_group' ? upF32(deepseekV3Names(l).correction) : 0n, ...shared };
    }
    layers.push({ ...common, ...attention, ...ffn });
  }
  const rope = ropeFrequencies(s);
  const invFreq = alloc(4 * rope.invFreq.length, 'RoPE frequencies');
  d.htod(invFreq, new Uint8Array(rope.invFreq.buffer, rope.invFreq.byteOffset, rope.invFreq.byteLength));
  const finalNorm = up(FINAL_NORM);
  const lmHead = s.tieWordEmbeddings ? embed : up(LM_HEAD);
  return { embed, finalNorm, lmHead, layers, invFreq, ropeScale: rope.scale };
}
