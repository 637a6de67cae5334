// The MoE op of one layer, the CPU twin of the GPU route-and-split kernel: route every token, split the
// picks into hot and cold by the slot table, count them, then compute each pick from its bank row.
import { clampedSwigluExpert } from './moe-ops.ts';
import { groupLimitedTopk, topkSoftmax } from './routers.ts';
import type { ClampedSwiglu, RouterSpec } from '../../model/spec.ts';
import { PICK, UNIT, expertUnits, unitPairs } from './expert-units.ts';
import { heapAlloc, type Alloc } from './alloc.ts';
import type { CpuExpertBanks } from './banks.ts';
import type { RowCompute } from './row-compute.ts';
import { computeQuantUnits } from './quant-linear.ts';

/** Scratch the MoE op needs for up to `tokens` tokens; allocated once per batch size. */
export interface MoeScratch {
  readonly routerLogits: Float32Array; // [T][E]
  readonly routerProbs: Float32Array; // [T][E]
  readonly ids: Int32Array; // [T][K]
  readonly weights: Float32Array; // [T][K]
  /** One output vector per pick, so the combine can sum in router order whatever the compute order. */
  readonly pickOut: Float32Array; // [T*K][H]
  /** Picks ordered by slot: hot rows first, then cold rows (the split). */
  readonly order: Int32Array; // [T*K]
  readonly slotStart: Int32Array; // [E+1]
  /** The expert compute as units and their picks (see expert-units.ts). */
  readonly units: Int32Array; // [T*K][UNIT]
  readonly unitPicks: Int32Array; // [T*K][PICK]
  /** Activation scratch of the JS expert loops run on the calling thread (2*I floats). */
  readonly act: Float32Array;
}

/** Arrays other threads or the SIMD kernel read or write (router logits, probabilities, picks, pick outputs, units) come from `alloc`. */
export function moeScratch(tokens: number, hidden: number, experts: number, topK: number, alloc: Alloc = heapAlloc, inter = 0): MoeScratch {
  return {
    routerLogits: alloc.f32(tokens * experts),
    routerProbs: alloc.f32(tokens * experts),
    ids: alloc.i32(tokens * topK),
    weights: alloc.f32(tokens * topK),
    pickOut: alloc.f32(tokens * topK * hidden),
    order: new Int32Array(tokens * topK),
    slotStart: new Int32Array(experts + 1),
    units: alloc.i32(tokens * topK * UNIT),
    unitPicks: alloc.i32(tokens * topK * PICK),
    act: new Float32Array(2 * inter),
  };
}

export interface MoeShape {
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
  readonly inter: number;
  readonly normTopkProb: boolean;
  /** The family's router (absent: softmax over all experts, top-k). */
  readonly router?: RouterSpec;
  /** gpt-oss experts (bank rows carry their biases; computed by the JS loop on the calling thread). */
  readonly clamped?: ClampedSwiglu;
}

/** A layer's router tensors beyond the weight: gpt-oss's logit bias, DeepSeek's correction bias. */
export interface RouterExtras {
  readonly bias?: Float32Array;
  readonly correction?: Float32Array;
}

/**
 * out[t] = sum_k w[t][k] * expert_{ids[t][k]}(x[t]) for T tokens of layer `layer`. When `counter` is
 * given, adds one per pick to counter[layer*E + expert]. Returns the number of cold picks.
 */
export function moeLayer(
  out: Float32Array,
  x: Float32Array,
  tokens: number,
  layer: number,
  router: Float32Array,
  banks: CpuExpertBanks,
  shape: MoeShape,
  s: MoeScratch,
  counter: Uint32Array | null,
  compute: RowCompute,
  extras: RouterExtras = {},
): number {
  const { hidden: H, experts: E, topK: K, inter: I } = shape;
  if (shape.router === undefined || shape.router.kind === 'softmax_topk') {
    // Route: logits = gate W x, softmax over all experts, top-k, renormalize.
    compute.route(s.routerLogits, s.routerProbs, s.ids, s.weights, router, x, tokens, E, H, K, shape.normTopkProb);
  } else {
    compute.linear(s.routerLogits, router, 0, x, tokens, E, H);
    routeFamily(shape.router, s, tokens, E, K, shape.normTopkProb, extras);
  }
  // Split: order picks by slot (a counting sort), so hot rows come first and a row's tokens are adjacent.
  const slots = banks.slots[layer]!;
  const picks = tokens * K;
  const start = s.slotStart;
  start.fill(0);
  for (let p = 0; p < picks; p++) start[slots[s.ids[p]!]! + 1]!++;
  for (let i = 0; i < E; i++) start[i + 1]! += start[i]!;
  const coldPicks = picks - start[banks.hotPerLayer]!;
  for (let p = 0; p < picks; p++) s.order[start[slots[s.ids[p]!]!]!++] = p;
  // Count: one per routed pick.
  if (counter !== null) {
    const base = layer * E;
    for (let p = 0; p < picks; p++) counter[base + s.ids[p]!]!++;
  }
  // Compute: hot picks from the hot bank, cold picks read in place from the cold bank, as units (a row
  // and the picks of it) that the compute may share out between threads.
  const units = expertUnits(s.units, s.unitPicks, s.order, s.ids, slots, banks.where[layer]!, picks, K, H);
  // Quantized rows (quant-linear.ts): shared out by the compute, gpt-oss's clamped ones on the calling thread.
  if (banks.quant && shape.clamped) computeQuantUnits(s.pickOut, s.units, s.unitPicks, 0, units, banks.quantRows, banks.rowSize, x, H, I, s.act, shape.clamped);
  else if (banks.quant) compute.quantExperts(s.pickOut, s.units, s.unitPicks, units, x, tokens, H, I);
  else if (shape.clamped) clampedExpertUnits(s.pickOut, s.units, s.unitPicks, units, banks, x, H, I, shape.clamped, s.act);
  else compute.experts(s.pickOut, s.units, s.unitPicks, units, x, tokens, H, I);
  // Combine in router order (independent of bank placement).
  compute.combine(out, s.weights, s.pickOut, tokens, K, H);
  return coldPicks;
}

/** The non-softmax routers (routers.ts); routerProbs receives each token's choice scores. */
function routeFamily(r: RouterSpec, s: MoeScratch, tokens: number, E: number, K: number, normalize: boolean, extras: RouterExtras): void {
  if (r.kind === 'topk_softmax') {
    const b = extras.bias;
    for (let t = 0; t < tokens; t++) {
      if (b) for (let e = 0; e < E; e++) s.routerLogits[t * E + e] = s.routerLogits[t * E + e]! + b[e]!;
      s.routerProbs.set(s.routerLogits.subarray(t * E, t * E + E), t * E);
      topkSoftmax(s.ids, t * K, s.weights, t * K, s.routerLogits, t * E, E, K);
    }
    return;
  }
  if (r.kind === 'sigmoid_group') {
    const group = new Float32Array(r.nGroup);
    const params = { ...r, normalize };
    for (let t = 0; t < tokens; t++) {
      groupLimitedTopk(s.ids, t * K, s.weights, t * K, s.routerProbs, s.routerLogits, t * E, E, K, extras.correction!, params, group);
    }
  }
}

/** gpt-oss expert units on the calling thread: each pick's output from its bank row (rows carry the biases). */
function clampedExpertUnits(
  out: Float32Array,
  units: Int32Array,
  unitPicks: Int32Array,
  count: number,
  banks: CpuExpertBanks,
  x: Float32Array,
  hidden: number,
  inter: number,
  act: ClampedSwiglu,
  scratch: Float32Array,
): void {
  for (let n = 0; n < count; n++) {
    const bank = banks.pieces[units[n * UNIT]!]!;
    const row = units[n * UNIT + 1]!;
    unitPairs(units, unitPicks, n, (outA, outB, xA, xB) => {
      clampedSwigluExpert(out, outA, bank, row, x, xA, hidden, inter, act, scratch);
      if (outB >= 0) clampedSwigluExpert(out, outB, bank, row, x, xB, hidden, inter, act, scratch);
    });
  }
}
