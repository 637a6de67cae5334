// Restore: the shortest sequence of hot<->cold row exchanges that turns one map into another.
import { ResidencyError } from '../errors.ts';
import { geometry, sameGeometry, type RowMap } from './rowmap.ts';
import type { Swap } from './policy.ts';

/**
 * Plans the row exchanges (each swaps one hot row with one cold row of a layer, the only move the banks
 * offer) that turn `from` into `to` exactly, rows and order included. Swaps are listed in the order they
 * must be applied; each names the experts its rows hold at that point, so the apply-time stale check holds.
 *
 * Why it is minimal: per layer, position p (hot rows, then cold rows) holds an expert that belongs at
 * position want(p); the permutation p -> want(p) splits into cycles. A swap changes the cycle count by
 * exactly one, so n - cycles swaps are needed with free transpositions. Here a cycle inside one bank
 * ("pure") can never be split by a hot<->cold swap: the first swap touching it must merge it with a cycle
 * holding a row of the other bank, and each swap touches one hot and one cold row, so at least
 * max(pureHot, pureCold) merges are needed, each costing two swaps (one merge, one extra split).
 * This plan pairs pure hot cycles with pure cold ones (one merge for two), merges the rest into any
 * row of the other bank, then splits every mixed cycle of length L in L - 1 swaps, choosing each swap so
 * the cycle stays mixed. Total: n - cycles + 2 * max(pureHot, pureCold), the lower bound.
 */
export function planRestore(from: RowMap, to: RowMap, step: number): Swap[] {
  if (!sameGeometry(from, to)) {
    throw new ResidencyError('BAD_MAP', `cannot restore across geometries: ${geometry(from)} vs ${geometry(to)}`);
  }
  const out: Swap[] = [];
  for (let l = 0; l < from.layers; l++) planLayer(from, to, l, step, out);
  return out;
}

function planLayer(from: RowMap, to: RowMap, layer: number, step: number, out: Swap[]): void {
  const H = from.hot_per_layer;
  const n = from.experts;
  const now = [...from.layers_map[layer]!.hot, ...from.layers_map[layer]!.cold]; // position -> expert
  const target = new Int32Array(n); // expert -> position in `to`
  [...to.layers_map[layer]!.hot, ...to.layers_map[layer]!.cold].forEach((e, p) => { target[e] = p; });
  const want = (p: number) => target[now[p]!]!;
  const isHot = (p: number) => p < H;

  const exchange = (a: number, b: number) => {
    const [h, c] = isHot(a) ? [a, b] : [b, a];
    if (!isHot(h) || isHot(c)) throw new ResidencyError('INTERNAL', 'restore planned a same-bank exchange');
    out.push({ layer, hotExpert: now[h]!, hotRow: h, coldExpert: now[c]!, coldRow: c - H, decidedAtStep: step, reason: 'restore' });
    [now[h], now[c]] = [now[c]!, now[h]!];
  };

  // 1. Merge pure cycles: pair a pure hot cycle with a pure cold one, else with any row of the other bank.
  const cycles = cyclesOf(n, want);
  const pureHot = cycles.filter((c) => c.length > 1 && c.every(isHot));
  const pureCold = cycles.filter((c) => c.length > 1 && !c.some(isHot));
  for (let i = 0; i < Math.max(pureHot.length, pureCold.length); i++) {
    const h = pureHot[i]?.[0] ?? 0; // hot row 0 is some cycle's member; merging into it is still a merge
    const c = pureCold[i]?.[0] ?? H;
    exchange(h, c);
  }

  // 2. Split each (now mixed) cycle: exchanging p with want(p) puts one expert home and shortens the cycle.
  for (const cycle of cyclesOf(n, want)) {
    const ring = cycle.slice(); // ring[i] holds the expert that belongs at ring[i+1]
    while (ring.length > 1) {
      const hotLeft = ring.filter(isHot).length;
      let i = 0;
      if (ring.length > 2) {
        // A cross-bank step whose destination is not the last row of its bank in the ring keeps it mixed.
        i = ring.findIndex((p, k) => {
          const q = ring[(k + 1) % ring.length]!;
          const left = isHot(q) ? hotLeft : ring.length - hotLeft;
          return isHot(p) !== isHot(q) && left >= 2;
        });
        if (i < 0) throw new ResidencyError('INTERNAL', 'restore found a pure cycle after merging');
      }
      const p = ring[i]!;
      const q = ring[(i + 1) % ring.length]!;
      exchange(p, q);
      ring.splice((i + 1) % ring.length, 1);
    }
  }
  for (let p = 0; p < n; p++) {
    if (want(p) !== p) throw new ResidencyError('INTERNAL', `restore left layer ${layer} position ${p} unsorted`);
  }
}

/** Cycles of p -> want(p), each listed in order of the map (ring[i] holds what belongs at ring[i+1]). */
function cyclesOf(n: number, want: (p: number) => number): number[][] {
  const seen = new Uint8Array(n);
  const cycles: number[][] = [];
  for (let s = 0; s < n; s++) {
    if (seen[s]) continue;
    const cycle: number[] = [];
    for (let p = s; !seen[p]; p = want(p)) { seen[p] = 1; cycle.push(p); }
    cycles.push(cycle);
  }
  return cycles;
}

/** The fewest exchanges any plan needs (the bound planRestore meets), for tests and reports. */
export function restoreLowerBound(from: RowMap, to: RowMap): number {
  let total = 0;
  const H = from.hot_per_layer;
  for (let l = 0; l < from.layers; l++) {
    const now = [...from.layers_map[l]!.hot, ...from.layers_map[l]!.cold];
    const target = new Int32Array(from.experts);
    [...to.layers_map[l]!.hot, ...to.layers_map[l]!.cold].forEach((e, p) => { target[e] = p; });
    const cycles = cyclesOf(from.experts, (p) => target[now[p]!]!);
    const pureHot = cycles.filter((c) => c.length > 1 && c.every((p) => p < H)).length;
    const pureCold = cycles.filter((c) => c.length > 1 && c.every((p) => p >= H)).length;
    total += from.experts - cycles.length + 2 * Math.max(pureHot, pureCold);
  }
  return total;
}
