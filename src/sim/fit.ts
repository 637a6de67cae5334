// Maps from counts for the simulator: top-H per layer (the seed fit, by the live fitter) and the identity map.
import { toRows, type CountsDump } from '../residency/counts.ts';
import { fitMap } from '../residency/fit.ts';
import { identityRowMap, type RowMap } from '../residency/rowmap.ts';
import type { Geometry } from './policies/policy.ts';
import type { SimStep } from './traffic.ts';
import type { RoutingTrace } from './traces/trace.ts';

/** A counts dump (format v1) holding `counts` as its cumulative table: what a live run would have dumped. */
export function countsDumpOf(counts: ArrayLike<number>, g: Geometry, model: string): CountsDump {
  const rows = toRows(counts, g.layers, g.experts);
  return { version: 1, model, step: 0, decode_steps: 0, half_life: 500, decayed: rows, cumulative: rows };
}

/**
 * The seed fit: top-H experts of each layer by count, through the live fitter (src/residency/fit.ts), so
 * a map fitted here is the map `fit-map` would write from the same counts.
 */
export function topHMap(counts: ArrayLike<number>, g: Geometry, model: string): RowMap {
  return fitMap(countsDumpOf(counts, g, model), { hot: g.hotPerLayer, model });
}

/** Experts 0..H-1 hot in every layer: a map that knows nothing about the traffic. */
export function identityMap(g: Geometry, model: string): RowMap {
  return identityRowMap(model, g.layers, g.experts, g.hotPerLayer);
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
