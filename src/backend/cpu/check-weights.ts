// Refuses weights whose sizes do not match the spec before the CPU backend reads them (a loader bug would
// otherwise read out of bounds), for every family's layer kinds.
import { ResidencyError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, ModelWeights } from '../../model/weights.ts';

export function checkWeights(spec: ModelSpec, w: ModelWeights): void {
  const H = spec.hiddenSize;
  const d = spec.headDim;
  const qW = spec.numHeads * d;
  const kvW = spec.numKvHeads * d;
  const I = spec.expertIntermediate;
  const want = (name: string, a: Float32Array | undefined, n: number): void => {
    if (!a || a.length !== n) {
      throw new ResidencyError('BAD_CHECKPOINT', `${name}: expected ${n} floats, got ${a ? a.length : 'none'}`);
    }
  };
  const mlp = (name: string, e: ExpertWeights | undefined, inter: number): void => {
    want(`${name}.gate`, e?.gate, inter * H);
    want(`${name}.up`, e?.up, inter * H);
    want(`${name}.down`, e?.down, H * inter);
  };
  if (spec.numHeads % spec.numKvHeads !== 0) {
    throw new ResidencyError('UNSUPPORTED_MODEL', `numHeads ${spec.numHeads} is not a multiple of numKvHeads ${spec.numKvHeads}`);
  }
  want('embed', w.embed, spec.vocabSize * H);
  want('lmHead', w.lmHead, spec.vocabSize * H);
  want('finalNorm', w.finalNorm, H);
  if (w.layers.length !== spec.numLayers) {
    throw new ResidencyError('BAD_CHECKPOINT', `layers: expected ${spec.numLayers}, got ${w.layers.length}`);
  }
  const moe = new Set(spec.moeLayers ?? w.layers.map((_, l) => l));
  const qkNorm = spec.qkNorm ?? 'head';
  w.layers.forEach((lw, l) => {
    const p = `layers[${l}]`;
    want(`${p}.inputNorm`, lw.inputNorm, H);
    want(`${p}.postAttnNorm`, lw.postAttnNorm, H);
    const m = spec.mla;
    if (m) {
      const qk = m.qkNopeDim + d;
      want(`${p}.mla.qA`, lw.mla?.qA, m.qLoraRank * H);
      want(`${p}.mla.qANorm`, lw.mla?.qANorm, m.qLoraRank);
      want(`${p}.mla.qB`, lw.mla?.qB, spec.numHeads * qk * m.qLoraRank);
      want(`${p}.mla.kvA`, lw.mla?.kvA, (m.kvLoraRank + d) * H);
      want(`${p}.mla.kvANorm`, lw.mla?.kvANorm, m.kvLoraRank);
      want(`${p}.mla.kvB`, lw.mla?.kvB, spec.numHeads * (m.qkNopeDim + m.vHeadDim) * m.kvLoraRank);
      want(`${p}.oProj`, lw.oProj, H * spec.numHeads * m.vHeadDim);
    } else {
      want(`${p}.qProj`, lw.qProj, qW * H);
      want(`${p}.kProj`, lw.kProj, kvW * H);
      want(`${p}.vProj`, lw.vProj, kvW * H);
      want(`${p}.oProj`, lw.oProj, H * qW);
      if (qkNorm !== 'none') {
        want(`${p}.qNorm`, lw.qNorm, qkNorm === 'head' ? d : qW);
        want(`${p}.kNorm`, lw.kNorm, qkNorm === 'head' ? d : kvW);
      }
    }
    if (spec.attentionBias) {
      want(`${p}.qBias`, lw.qBias, qW);
      want(`${p}.kBias`, lw.kBias, kvW);
      want(`${p}.vBias`, lw.vBias, kvW);
      want(`${p}.oBias`, lw.oBias, H);
    }
    if (spec.attentionSinks) want(`${p}.sinks`, lw.sinks, spec.numHeads);
    if (!moe.has(l)) {
      mlp(`${p}.dense`, lw.dense, spec.denseIntermediate ?? 0);
      return;
    }
    want(`${p}.router`, lw.router, spec.numExperts * H);
    if (spec.router?.kind === 'topk_softmax' && spec.router.bias) want(`${p}.routerBias`, lw.routerBias, spec.numExperts);
    if (spec.router?.kind === 'sigmoid_group') want(`${p}.correctionBias`, lw.correctionBias, spec.numExperts);
    if (spec.sharedIntermediate) mlp(`${p}.shared`, lw.shared, spec.sharedIntermediate);
    if (lw.experts.length !== spec.numExperts) {
      throw new ResidencyError('BAD_CHECKPOINT', `${p}.experts: expected ${spec.numExperts}, got ${lw.experts.length}`);
    }
    lw.experts.forEach((e, x) => {
      mlp(`${p}.experts[${x}]`, e, I);
      if (spec.expertAct) {
        want(`${p}.experts[${x}].gateBias`, e.gateBias, I);
        want(`${p}.experts[${x}].upBias`, e.upBias, I);
        want(`${p}.experts[${x}].downBias`, e.downBias, H);
      }
    });
  });
}
