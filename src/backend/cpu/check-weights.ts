// Refuses weights whose sizes do not match the spec before the CPU backend reads them (a loader bug would
// otherwise read out of bounds), for every family's layer kinds; quantized matrices where the CPU computes them
// (attention projections, MLA's, routed experts, dense and shared MLPs), bf16 as stored or float32 for the
// embedding and lm head, float32 elsewhere.
import { ResidencyError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, ModelWeights, StoredExpert } from '../../model/weights.ts';
import { isQuantized, type Matrix } from '../../model/quant.ts';
import { int4StoredShape } from '../../model/int4-repack.ts';

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
  /** A [rows][cols] matrix: float32, or quantized with data and scales of its shape. */
  const wantMatrix = (name: string, m: Matrix | undefined, rows: number, cols: number): void => {
    if (!m || !isQuantized(m)) return want(name, m, rows * cols);
    const [br, bc] = m.block;
    const [data, scales] =
      m.format === 'fp8' ? [rows * cols, Math.ceil(rows / br) * Math.ceil(cols / bc)] : m.format === 'bf16' ? [rows * cols, 0]
      : m.format === 'int4' ? [(rows * cols) / 2, (rows * cols) / bc] : [(rows * cols) / 2, (rows * cols) / 32];
    const badInt4 = m.format === 'int4' && (cols % 8 !== 0 || cols % bc !== 0 || br !== 1 || (m.zeros.length !== 0 && m.zeros.length !== scales));
    if (m.rows !== rows || m.cols !== cols || m.data.length !== data || m.scales.length !== scales || badInt4 || (m.format === 'mxfp4' && (cols % 32 !== 0 || br !== 1 || bc !== 32))) {
      throw new ResidencyError('BAD_CHECKPOINT',
        `${name}: expected a [${rows}][${cols}] ${m.format} matrix (${data} data bytes, ${scales} scales), got [${m.rows}][${m.cols}] in blocks of ${br}x${bc} with ${m.data.length} and ${m.scales.length}`);
    }
  };
  const mlp = (name: string, e: ExpertWeights | undefined, inter: number): void => {
    wantMatrix(`${name}.gate`, e?.gate, inter, H);
    wantMatrix(`${name}.up`, e?.up, inter, H);
    wantMatrix(`${name}.down`, e?.down, H, inter);
  };
  /** A dense or shared MLP (family-mlp.ts): its three matrices all float32 or all quantized. */
  const wholeMlp = (name: string, e: ExpertWeights | undefined, inter: number): void => {
    mlp(name, e, inter);
    const kinds = e ? [e.gate, e.up, e.down].map((x) => (isQuantized(x) ? x.format : 'float32')) : [];
    const floats = kinds.filter((k) => k === 'float32').length;
    if (floats > 0 && floats < kinds.length) {
      throw new ResidencyError('UNSUPPORTED_MODEL',
        `${name}: gate, up and down are ${kinds.join(', ')}; the CPU backend computes a dense or shared MLP either all float or all quantized (quantization_config.modules_to_not_convert must list all three of its projections or none)`);
    }
  };
  if (spec.numHeads % spec.numKvHeads !== 0) {
    throw new ResidencyError('UNSUPPORTED_MODEL', `numHeads ${spec.numHeads} is not a multiple of numKvHeads ${spec.numKvHeads}`);
  }
  /** The embedding and lm head: float32, or bf16 kept as stored (the embedding widens bf16 rows only). */
  const wantVocab = (name: string, m: Matrix): void => {
    if (isQuantized(m) && m.format !== 'bf16') {
      throw new ResidencyError('BAD_CHECKPOINT', `${name}: a ${m.format} matrix; the CPU backend reads the embedding and lm head as float32 or bf16 only`);
    }
    wantMatrix(name, m, spec.vocabSize, H);
  };
  wantVocab('embed', w.embed);
  wantVocab('lmHead', w.lmHead);
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
      wantMatrix(`${p}.mla.qA`, lw.mla?.qA, m.qLoraRank, H);
      want(`${p}.mla.qANorm`, lw.mla?.qANorm, m.qLoraRank);
      wantMatrix(`${p}.mla.qB`, lw.mla?.qB, spec.numHeads * qk, m.qLoraRank);
      wantMatrix(`${p}.mla.kvA`, lw.mla?.kvA, m.kvLoraRank + d, H);
      want(`${p}.mla.kvANorm`, lw.mla?.kvANorm, m.kvLoraRank);
      wantMatrix(`${p}.mla.kvB`, lw.mla?.kvB, spec.numHeads * (m.qkNopeDim + m.vHeadDim), m.kvLoraRank);
      wantMatrix(`${p}.oProj`, lw.oProj, H, spec.numHeads * m.vHeadDim);
    } else {
      wantMatrix(`${p}.qProj`, lw.qProj, qW, H);
      wantMatrix(`${p}.kProj`, lw.kProj, kvW, H);
      wantMatrix(`${p}.vProj`, lw.vProj, kvW, H);
      wantMatrix(`${p}.oProj`, lw.oProj, H, qW);
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
      wholeMlp(`${p}.dense`, lw.dense, spec.denseIntermediate ?? 0);
      return;
    }
    want(`${p}.router`, lw.router, spec.numExperts * H);
    if (spec.router?.kind === 'topk_softmax' && spec.router.bias) want(`${p}.routerBias`, lw.routerBias, spec.numExperts);
    if (spec.router?.kind === 'sigmoid_group') want(`${p}.correctionBias`, lw.correctionBias, spec.numExperts);
    if (spec.sharedIntermediate) wholeMlp(`${p}.shared`, lw.shared, spec.sharedIntermediate);
    if (lw.experts.length !== spec.numExperts) {
      throw new ResidencyError('BAD_CHECKPOINT', `${p}.experts: expected ${spec.numExperts}, got ${lw.experts.length}`);
    }
    lw.experts.forEach((e, x) => {
      if (e.stored) return storedMlp(`${p}.experts[${x}]`, e.stored, I, H);
      mlp(`${p}.experts[${x}]`, e, I);
      if (spec.expertAct) {
        want(`${p}.experts[${x}].gateBias`, e.gateBias, I);
        want(`${p}.experts[${x}].upBias`, e.upBias, I);
        want(`${p}.experts[${x}].downBias`, e.downBias, H);
      }
    });
  });
}

/** A streamed expert's stored tensors (StoredExpert): the shapes its row is read in (their values are checked as they land). */
function storedMlp(name: string, e: StoredExpert, I: number, H: number): void {
  for (const [part, rows, cols] of [['gate', I, H], ['up', I, H], ['down', H, I]] as const) {
    // A 4-bit weight is its stored tensors (int4-tensors.ts): its shape is its packed values'.
    const shape = e.int4 && !e.source.has(e[part]) ? int4StoredShape(e.int4, e[part], (n) => (e.source.has(n) ? e.source.info(n).shape : undefined)) : e.source.info(e[part]).shape;
    if (shape.length !== 2 || shape[0] !== rows || shape[1] !== cols) {
      throw new ResidencyError('BAD_CHECKPOINT', `${name}.${part}: expected tensor ${e[part]} of shape [${rows}][${cols}], got [${shape.join('][')}]`);
    }
  }
}
