// Converts raw checkpoint tensors to float32 (exactly: bf16 and f16 are subsets of f32) and assembles
// the ModelWeights the CPU backend computes with.

import { ResidencyError } from '../errors.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames } from './architecture.ts';
import type { ModelSpec } from './spec.ts';
import { familyOf } from './families/index.ts';
import type { ExpertWeights, LayerWeights, ModelWeights, RawTensor } from './weights.ts';

/** f16 bit pattern -> f32 bit pattern, exact for normals, subnormals, infinities and NaN. */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0; // inf / NaN
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0; // rebias 15 -> 127
  if (mant === 0) return sign >>> 0; // +-0
  // Subnormal: shift the mantissa up until its leading 1 reaches the implicit bit.
  let e = 113;
  while ((mant & 0x400) === 0) {
    mant <<= 1;
    e--;
  }
  return (sign | (e << 23) | ((mant & 0x3ff) << 13)) >>> 0;
}

/** A weight that is NaN or infinite: the checkpoint is corrupt (served, it gives garbage or no tokens). */
function nonFinite(t: RawTensor, i: number, f32Bits: number): ResidencyError {
  const what = (f32Bits & 0x7fffff) !== 0 ? 'NaN' : f32Bits >>> 31 ? '-Infinity' : 'Infinity';
  return new ResidencyError('BAD_CHECKPOINT',
    `tensor "${t.name}": element ${i} of ${t.shape.join('x')} is ${what}; the checkpoint is corrupt (download or convert it again)`);
}

/**
 * One tensor as float32 (a fresh array). Bytes are little-endian; they are assembled byte by byte
 * because a tensor's offset in its shard need not be aligned. Assumes a little-endian host (all targets).
 * `finite`: refuse a NaN or infinite value (BAD_CHECKPOINT naming the tensor), checked in the conversion
 * loop itself rather than in a second pass over the weights.
 */
export function tensorToFloat32(t: RawTensor, opts: { readonly finite?: boolean } = {}): Float32Array {
  const b = t.bytes;
  const finite = opts.finite === true;
  switch (t.dtype) {
    case 'BF16': {
      const n = b.length >> 1;
      const out = new Float32Array(n);
      // bf16 is the top half of an f32: writing it into the high half of each f32 is exact.
      if (b.byteOffset % 2 === 0) {
        // Aligned (the usual case: safetensors pads its header to 8 bytes): 16-bit lanes, 2x faster.
        const src = new Uint16Array(b.buffer, b.byteOffset, n);
        const dst = new Uint16Array(out.buffer);
        for (let i = 0; i < n; i++) {
          const h = src[i]!;
          if (finite && (h & 0x7f80) === 0x7f80) throw nonFinite(t, i, h << 16);
          dst[2 * i + 1] = h;
        }
      } else {
        const bits = new Uint32Array(out.buffer);
        for (let i = 0; i < n; i++) {
          const f = ((b[2 * i]! | (b[2 * i + 1]! << 8)) << 16) >>> 0;
          if (finite && (f & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, f);
          bits[i] = f;
        }
      }
      return out;
    }
    case 'F16': {
      const n = b.length >> 1;
      const out = new Float32Array(n);
      const bits = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) {
        const f = f16BitsToF32Bits(b[2 * i]! | (b[2 * i + 1]! << 8));
        if (finite && (f & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, f);
        bits[i] = f;
      }
      return out;
    }
    case 'F32': {
      const out = new Float32Array(b.length >> 2);
      new Uint8Array(out.buffer).set(b);
      if (finite) {
        const bits = new Uint32Array(out.buffer);
        for (let i = 0; i < bits.length; i++) if ((bits[i]! & 0x7f800000) === 0x7f800000) throw nonFinite(t, i, bits[i]!);
      }
      return out;
    }
    case 'U8': // packed data (MXFP4 blocks, scales): its family's loader reads it (families/)
      throw new ResidencyError('BAD_CHECKPOINT', `tensor "${t.name}" is U8 where a float tensor is expected`);
  }
}

/**
 * Builds ModelWeights from validated raw tensors (checkArchitecture must have passed). `onTensor` is
 * called after each conversion with the tensor's raw byte size, for progress.
 */
export function toFloat32Weights(
  spec: ModelSpec,
  raw: ReadonlyMap<string, RawTensor>,
  onTensor?: (name: string, bytes: number) => void,
): ModelWeights {
  const family = familyOf(spec.architecture);
  if (family) return family.weights(spec, raw, onTensor);
  const get = (name: string): Float32Array => {
    const t = raw.get(name);
    if (!t) throw new ResidencyError('BAD_CHECKPOINT', `tensor "${name}" is missing`);
    const f = tensorToFloat32(t, { finite: true });
    onTensor?.(name, t.bytes.length);
    return f;
  };
  const embed = get(EMBED);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerTensorNames(l);
    const experts: ExpertWeights[] = [];
    for (let e = 0; e < spec.numExperts; e++) {
      const x = n.expert(e);
      experts.push({ gate: get(x.gate), up: get(x.up), down: get(x.down) });
    }
    layers.push({
      inputNorm: get(n.inputNorm),
      qProj: get(n.qProj),
      kProj: get(n.kProj),
      vProj: get(n.vProj),
      oProj: get(n.oProj),
      qNorm: get(n.qNorm),
      kNorm: get(n.kNorm),
      postAttnNorm: get(n.postAttnNorm),
      router: get(n.router),
      experts,
    });
  }
  const finalNorm = get(FINAL_NORM);
  const lmHead = spec.tieWordEmbeddings ? embed : get(LM_HEAD);
  return { embed, layers, finalNorm, lmHead };
}
