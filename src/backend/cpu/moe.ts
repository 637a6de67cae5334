// The MoE op of one layer, the CPU twin of the GPU route-and-split kernel: route every token, split the
// picks into hot and cold by the slot table, count them, then compute each pick from its bank row.
import { softmax, topk } from './moe-ops.ts';
import { UNIT, expertUnits } from './expert-units.ts';
import { heapAlloc, type Alloc } from './alloc.ts';
import type { CpuExpertBanks } from './banks.ts';
import type { RowCompute } from './row-compute.ts';

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
  /** The expert compute as units (see expert-units.ts). */
  readonly units: Int32Array; // [T*K][UNIT]
}

/** Arrays other threads read or write (router logits, the normed input, pick outputs, units) come from `alloc`. */
export function moeScratch(tokens: number, hidden: number, experts: number, topK: number, alloc: Alloc = heapAlloc): MoeScratch {
  return {
    routerLogits: alloc.f32(tokens * experts),
    routerProbs: new Float32Array(tokens * experts),
    ids: new Int32Array(tokens * topK),
    weights: new Float32Array(tokens * topK),
    pickOut: alloc.f32(tokens * topK * hidden),
    order: new Int32Array(tokens * topK),
    slotStart: new Int32Array(experts + 1),
    units: alloc.i32(tokens * topK * UNIT),
  };
}

export interface MoeShape {
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
  readonly inter: number;
  readonly normTopkProb: boolean;
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
): number {
  const { hidden: H, experts: E, topK: K, inter: I } = shape;
  // Route: logits = gate W x, softmax over all experts, top-k, renormalize.
  compute.linear(s.routerLogits, router, 0, x, tokens, E, H);
  for (let t = 0; t < tokens; t++) {
    softmax(s.routerProbs, t * E, s.routerLogits, t * E, E);
    topk(s.ids, t * K, s.weights, t * K, s.routerProbs, t * E, E, K, shape.normTopkProb);
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
  // and its one or two picks) that the compute may share out between threads.
  const units = expertUnits(s.units, s.order, s.ids, slots, picks, layer, banks.hotPerLayer, banks.rowSize, K, H);
  compute.experts(s.pickOut, s.units, units, x, H, I);
  // Combine in router order (independent of bank placement).
  for (let t = 0; t < tokens; t++) {
    for (let o = 0; o < H; o++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += Math.fround(s.weights[t * K + k]! * s.pickOut[(t * K + k) * H + o]!);
      out[t * H + o] = acc;
    }
  }
  return coldPicks;
}
