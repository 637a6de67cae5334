// The op path's weights outside the banks, uploaded as stored: the embedding, each layer's norms, attention
// products (q | k | v stacked) and router, gpt-oss's biases and sinks, the final norm and the LM head, and
// RoPE's inverse frequencies (the spec's numbers, as the CPU computes them).
import type { ModelSpec } from '../../../model/spec.ts';
import type { TensorSource } from '../../../model/tensor-source.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames, moeTensorNames } from '../../../model/architecture.ts';
import { ropeFrequencies } from '../../cpu/family-attention.ts';
import { align16, attentionProducts, layerExtras, productBytes, type ProductWeights } from '../device-weights.ts';
import type { CudaDriver } from '../driver.ts';
import type { TensorUploader } from '../uploader.ts';

/** A dense product on the device: its values, its scale grid (fp8), and how they are stored. */
export interface DenseDev { w: bigint; grid: bigint; p: ProductWeights }

export interface LayerDev {
  inNorm: bigint; qkv: DenseDev; o: DenseDev; qNorm: bigint; kNorm: bigint; postNorm: bigint; router: bigint;
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
  const embed = up(EMBED);
  const layers: LayerDev[] = [];
  for (let l = 0; l < s.numLayers; l++) {
    const n = layerTensorNames(l);
    const a = attentionProducts(source, s, l);
    const qkv = dense(a.qkv, `qkv layer ${l}`);
    // Families without q/k norms (mixtral, gpt-oss): null norm weights, which the attention kernels skip.
    // OLMoE's norm the whole projections ([nh x hd], [nkv x hd]) in their own launch (the backend's enqueue).
    const qk = s.qkNorm === 'none' ? { qNorm: 0n, kNorm: 0n } : { qNorm: up(n.qNorm), kNorm: up(n.kNorm) };
    const x = layerExtras(s, l);
    layers.push({
      inNorm: up(n.inputNorm), qkv, o: dense(a.o, `o_proj layer ${l}`), ...qk, postNorm: up(n.postAttnNorm), router: up(moeTensorNames(s, l).router),
      qkvBias: upConcat(x.qkvBias, `q/k/v biases layer ${l}`), oBias: opt(x.oBias), sinks: opt(x.sinks), routerBias: opt(x.routerBias),
      window: s.slidingWindows?.[l] ?? 0,
    });
  }
  const rope = ropeFrequencies(s);
  const invFreq = alloc(4 * rope.invFreq.length, 'RoPE frequencies');
  d.htod(invFreq, new Uint8Array(rope.invFreq.buffer, rope.invFreq.byteOffset, rope.invFreq.byteLength));
  const finalNorm = up(FINAL_NORM);
  const lmHead = s.tieWordEmbeddings ? embed : up(LM_HEAD);
  return { embed, finalNorm, lmHead, layers, invFreq, ropeScale: rope.scale };
}
