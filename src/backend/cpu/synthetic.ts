// A small random Qwen3-MoE model (spec + float32 weights) for tests that must not need a checkpoint.
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, LayerWeights, ModelWeights } from '../../model/weights.ts';

import { mulberry32 } from '../../util/rng.ts';

export { mulberry32 };

export interface SyntheticOptions extends Partial<Omit<ModelSpec, 'architecture'>> {
  readonly seed?: number;
}

/** Random weights with the given geometry (defaults: 2 layers, 8 experts top-2, hidden 32). */
export function syntheticModel(opts: SyntheticOptions = {}): { spec: ModelSpec; weights: ModelWeights } {
  const spec: ModelSpec = {
    architecture: 'qwen3_moe',
    name: opts.name ?? 'synthetic',
    vocabSize: opts.vocabSize ?? 64,
    hiddenSize: opts.hiddenSize ?? 32,
    numLayers: opts.numLayers ?? 2,
    numHeads: opts.numHeads ?? 4,
    numKvHeads: opts.numKvHeads ?? 2,
    headDim: opts.headDim ?? 8,
    numExperts: opts.numExperts ?? 8,
    topK: opts.topK ?? 2,
    expertIntermediate: opts.expertIntermediate ?? 12,
    normTopkProb: opts.normTopkProb ?? true,
    rmsNormEps: opts.rmsNormEps ?? 1e-6,
    ropeTheta: opts.ropeTheta ?? 10000,
    tieWordEmbeddings: opts.tieWordEmbeddings ?? true,
    maxPositions: opts.maxPositions ?? 128,
    bosTokenId: opts.bosTokenId ?? 0,
    eosTokenIds: opts.eosTokenIds ?? [0],
  };
  const rand = mulberry32(opts.seed ?? 1);
  const mat = (n: number, scale: number): Float32Array => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * scale;
    return a;
  };
  const norm = (n: number): Float32Array => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = 0.8 + 0.4 * rand();
    return a;
  };
  const H = spec.hiddenSize;
  const qW = spec.numHeads * spec.headDim;
  const kvW = spec.numKvHeads * spec.headDim;
  const I = spec.expertIntermediate;
  const s = 1 / Math.sqrt(H);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const experts: ExpertWeights[] = [];
    for (let e = 0; e < spec.numExperts; e++) experts.push({ gate: mat(I * H, s), up: mat(I * H, s), down: mat(H * I, 1 / Math.sqrt(I)) });
    layers.push({
      inputNorm: norm(H),
      qProj: mat(qW * H, s),
      kProj: mat(kvW * H, s),
      vProj: mat(kvW * H, s),
      oProj: mat(H * qW, 1 / Math.sqrt(qW)),
      qNorm: norm(spec.headDim),
      kNorm: norm(spec.headDim),
      postAttnNorm: norm(H),
      router: mat(spec.numExperts * H, 2 * s),
      experts,
    });
  }
  const embed = mat(spec.vocabSize * H, 1);
  const lmHead = spec.tieWordEmbeddings ? embed : mat(spec.vocabSize * H, s);
  return { spec, weights: { embed, layers, finalNorm: norm(H), lmHead } };
}
