// Maps from counts for the simulator: top-H per layer (the seed fit) and the identity boot map.
import type { RowMap } from '../residency/rowmap.ts';
import type { Geometry } from './policies/policy.ts';
import type { SimStep } from './traffic.ts';
import type { RoutingTrace } from './traces/trace.ts';

/**
 * Top-H experts of each layer by count; ties go to the lower id so the fit is deterministic. Hot and cold
 * rows are listed in ascending id order. (The live fitter is src/residency/fit.ts; src/sim/seed.ts uses
 * it when it is present and this otherwise; both give top-H per layer.)
 */
export function topHMap(counts: ArrayLike<number>, g: Geometry, model: string): RowMap {
  const layers_map = [];
  for (let l = 0; l < g.layers; l++) {
    const ids = Array.from({ length: g.experts }, (_, e) => e);
    ids.sort((a, b) => (counts[l * g.experts + b]! - counts[l * g.experts + a]!) || a - b);
    const hot = ids.slice(0, g.hotPerLayer).sort((a, b) => a - b);
    const cold = ids.slice(g.hotPerLayer).sort((a, b) => a - b);
    layers_map.push({ hot, cold });
  }
  return { version: 1, model, layers: g.layers, experts: g.experts, hot_per_layer: g.hotPerLayer, layers_map };
}

/** Experts 0..H-1 hot in every layer: a map that knows nothing about the traffic. */
export function identityMap(g: Geometry, model: string): RowMap {
  const layers_map = [];
  for (let l = 0; l < g.layers; l++) {
    layers_map.push({
      hot: Array.from({ length: g.hotPerLayer }, (_, i) => i),
      cold: Array.from({ length: g.experts - g.hotPerLayer }, (_, i) => g.hotPerLayer + i),
    });
  }
  return { version: 1, model, layers: g.layers, experts: g.experts, hot_per_layer: g.hotPerLayer, layers_map };
}

/** Cumulative pick counts [layers * experts] over whole traces (what a counts dump of that traffic holds). */
export function traceCounts(traces: readonly RoutingTrace[], g: Geometry): Float64Array {
  const counts = new Float64Array(g.layers * g.experts);
  for (const t of traces) {
    for (let i = 0; i < t.ids.length; i++) {
      const l = Math.floor(i / g.topK) % g.layers;
      counts[l * g.experts + t.ids[i]!]!++;
    }
  }
  return counts;
}

/** Cumulative pick counts over a slice of the step stream. */
export function streamCounts(steps: readonly SimStep[], g: Geometry, from = 0, to = steps.length): Float64Array {
  const counts = new Float64Array(g.layers * g.experts);
  for (let s = from; s < to; s++) {
    const p = steps[s]!.picks;
    for (let i = 0; i < p.length; i++) counts[(Math.floor(i / g.topK) % g.layers) * g.experts + p[i]!]!++;
  }
  return counts;
}
