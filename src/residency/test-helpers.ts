// Test-only helpers for the residency tests: a seeded PRNG and random maps (no I/O).
import { identityRowMap, type RowMap } from './rowmap.ts';

/** mulberry32: small, fast, seeded; the same seed gives the same traffic on every machine. */
export { mulberry32 as rng } from '../util/rng.ts';

export function randInt(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo + 1));
}

export function shuffle<T>(r: () => number, xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

/** A map with every layer's experts shuffled across rows (same geometry as identityRowMap). */
export function randomRowMap(r: () => number, layers: number, experts: number, hot: number): RowMap {
  const base = identityRowMap('test', layers, experts, hot);
  return {
    ...base,
    layers_map: base.layers_map.map(() => {
      const ids = shuffle(r, Array.from({ length: experts }, (_, i) => i));
      return { hot: ids.slice(0, hot), cold: ids.slice(hot) };
    }),
  };
}

/**
 * Skewed routing for one step: `tokens` rows of [layers][topK] distinct experts drawn from a Zipf-like
 * preference order per layer (`order[l]`), so a "domain" is an ordering and a shift is a new ordering.
 */
export function skewedRouting(r: () => number, tokens: number, layers: number, experts: number, topK: number,
  order: readonly (readonly number[])[]): Uint8Array {
  const out = new Uint8Array(tokens * layers * topK);
  let i = 0;
  for (let t = 0; t < tokens; t++) {
    for (let l = 0; l < layers; l++) {
      const picked = new Set<number>();
      while (picked.size < topK) {
        const rank = Math.min(experts - 1, Math.floor(Math.pow(r(), 2.5) * experts));
        picked.add(order[l]![rank]!);
      }
      for (const e of picked) out[i++] = e;
    }
  }
  return out;
}
