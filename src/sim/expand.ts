// Expands a routing trace set to a bigger MoE geometry (more experts, more layers) for benchmarks at a
// real model's size, keeping the domain structure of the recorded routing instead of drawing uniform picks.
//
// The mapping (deterministic, no state):
// - big layer L reads fixture layer L mod F (F fixture layers), through a fixed per-layer permutation
//   `perm_L` of the fixture's expert ids, so big layers that share a fixture layer still differ;
// - fixture expert e stands for the group of G big experts {G*g .. G*g+G-1}, g = perm_L(e), G = bigExperts /
//   fixtureExperts (384 / 64 = 6);
// - the pick inside the group is a hash of (token row, L, e) drawn with a fixed skew over the G members,
//   rotated per (L, e) so the favourite member differs between groups. The skew does not depend on the
//   domain: whatever separates domains in the expanded trace comes from the fixture's own routing.
// - top-k stays top-k: distinct fixture experts map to distinct groups, so a token's picks stay distinct.
import { ResidencyError } from '../errors.ts';
import { mulberry32, shuffled } from './rng.ts';
import { traceSet, validateTrace, type RoutingTrace, type TraceSet } from './traces/trace.ts';

export interface ExpandOptions {
  readonly layers: number;
  readonly experts: number;
  /** Weights of the members of a group (rank 0 = favourite); normalized here. Length = experts / fixture experts. */
  readonly skew?: readonly number[];
  readonly seed?: number;
}

/**
 * The default skew for groups of 6: mild, the same for every domain. A steeper skew concentrates picks on each
 * group's favourite and flattens the shift the fixture shows (docs/results.md, "Simulator").
 */
export const DEFAULT_SKEW_6 = Object.freeze([0.25, 0.2, 0.17, 0.15, 0.13, 0.1]);

/** 32-bit integer mix (a murmur3 finalizer): the in-group draw must be reproducible everywhere. */
export function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** The fixed parts of an expansion: per-layer permutations and the skew's cumulative table. */
export interface Expansion {
  readonly fromLayers: number;
  readonly fromExperts: number;
  readonly layers: number;
  readonly experts: number;
  readonly group: number;
  /** perm[L * fromExperts + e] = group index of fixture expert e in big layer L. */
  readonly perm: Uint16Array;
  readonly cumulative: Float64Array;
  readonly seed: number;
}

export function expansion(from: { layers: number; experts: number }, o: ExpandOptions): Expansion {
  if (!Number.isInteger(o.experts) || o.experts % from.experts !== 0 || o.experts < from.experts) {
    throw new ResidencyError('BAD_ARGUMENT', `expand: experts must be a positive multiple of the trace's ${from.experts}, got ${o.experts}`);
  }
  if (!Number.isInteger(o.layers) || o.layers < 1) throw new ResidencyError('BAD_ARGUMENT', `expand: layers must be a positive integer, got ${o.layers}`);
  const group = o.experts / from.experts;
  const skew = o.skew ?? (group === 6 ? DEFAULT_SKEW_6 : Array.from({ length: group }, () => 1));
  if (skew.length !== group || skew.some((w) => !(w > 0))) {
    throw new ResidencyError('BAD_ARGUMENT', `expand: skew must hold ${group} positive weights (experts ${o.experts} / ${from.experts}), got ${skew.length}`);
  }
  const total = skew.reduce((a, b) => a + b, 0);
  const cumulative = new Float64Array(group);
  let acc = 0;
  skew.forEach((w, i) => { acc += w / total; cumulative[i] = acc; });
  cumulative[group - 1] = 1;
  const seed = o.seed ?? 0x5eed;
  const rand = mulberry32(seed);
  const perm = new Uint16Array(o.layers * from.experts);
  const ids = Array.from({ length: from.experts }, (_, e) => e);
  for (let L = 0; L < o.layers; L++) perm.set(shuffled(ids, rand), L * from.experts);
  return { fromLayers: from.layers, fromExperts: from.experts, layers: o.layers, experts: o.experts, group, perm, cumulative, seed };
}

/** Big expert id for fixture expert `e` picked at trace row `row` in big layer `L`. */
export function bigExpert(x: Expansion, row: number, L: number, e: number): number {
  const g = x.perm[L * x.fromExperts + e]!;
  const h = mix32(mix32(mix32(x.seed ^ row) ^ (L * 0x9e3779b1)) ^ (e * 0x7feb352d));
  const u = (h >>> 8) / 16777216;
  let rank = 0;
  while (rank < x.group - 1 && u >= x.cumulative[rank]!) rank++;
  // Rotate by (L, e) so each group has its own favourite member.
  const member = (rank + mix32((L << 16) ^ e ^ x.seed) % x.group) % x.group;
  return g * x.group + member;
}

/** One trace expanded (same rows, documents and name). */
export function expandTrace(t: RoutingTrace, x: Expansion): RoutingTrace {
  const K = t.topK;
  const ids = new Uint16Array(t.tokens * x.layers * K);
  for (let r = 0; r < t.tokens; r++) {
    for (let L = 0; L < x.layers; L++) {
      const src = (r * t.layers + (L % t.layers)) * K;
      const dst = (r * x.layers + L) * K;
      for (let k = 0; k < K; k++) ids[dst + k] = bigExpert(x, r, L, t.ids[src + k]!);
    }
  }
  const out: RoutingTrace = { name: t.name, layers: x.layers, experts: x.experts, topK: K, tokens: t.tokens, ids, docStarts: t.docStarts };
  return validateTrace(out, `expanded ${t.name}`);
}

/** Every trace of a set expanded to `o`'s geometry. */
export function expandTraceSet(set: TraceSet, o: ExpandOptions): TraceSet {
  const x = expansion(set, o);
  return traceSet([...set.traces.values()].map((t) => expandTrace(t, x)), `expanded ${set.layers}x${set.experts} -> ${o.layers}x${o.experts}`);
}
