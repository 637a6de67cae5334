// Seed-map fitter: top-H experts per layer from a counts dump, keeping every row that can stay as it is.
import { ResidencyError } from '../errors.ts';
import type { CountsDump } from './counts.ts';
import { assertRowMap, identityRowMap, type LayerRows, type RowMap } from './rowmap.ts';

export interface FitOptions {
  /** Hot experts per layer (default: the base map's). */
  readonly hot?: number;
  /** The map to start from: its hot experts win ties and keep their rows. Default: identity layout. */
  readonly base?: RowMap;
  /** Which table of the dump ranks experts. Default 'cumulative'. */
  readonly use?: 'cumulative' | 'decayed';
  /** Model name for the map (default: the dump's). */
  readonly model?: string;
}

/**
 * Per layer: rank experts by count (ties: hot in the base map first, then lower id) and make the top H hot.
 * Experts that stay hot keep their hot rows and experts that stay cold keep their cold rows; promoted experts
 * (busiest first) fill the freed hot rows in ascending row order, and demoted experts fill the freed cold
 * rows in ascending order, in the order of the hot rows they left. So the result is the base map plus one
 * row exchange per promoted expert. Deterministic: same dump and base, same map.
 */
export function fitMap(dump: CountsDump, opts: FitOptions = {}): RowMap {
  const table = dump[opts.use ?? 'cumulative'];
  const layers = table.length;
  const experts = table[0]?.length ?? 0;
  const hot = opts.hot ?? opts.base?.hot_per_layer;
  if (hot === undefined) throw new ResidencyError('BAD_ARGUMENT', 'fit: give the hot count per layer or a base map');
  if (!Number.isInteger(hot) || hot < 1 || hot >= experts) {
    throw new ResidencyError('BAD_ARGUMENT', `fit: hot must be an integer in 1..${experts - 1}, got ${hot}`);
  }
  const model = opts.model ?? opts.base?.model ?? dump.model;
  const base = opts.base ?? identityRowMap(model, layers, experts, hot);
  if (base.layers !== layers || base.experts !== experts) {
    throw new ResidencyError('BAD_MAP', `fit: base map is ${base.layers} x ${base.experts}, the dump ${layers} x ${experts}`);
  }
  if (base.hot_per_layer !== hot) {
    throw new ResidencyError('BAD_ARGUMENT', `fit: --hot ${hot} differs from the base map's hot_per_layer ${base.hot_per_layer} (the geometry is fixed)`);
  }
  const layers_map: LayerRows[] = [];
  for (let l = 0; l < layers; l++) layers_map.push(fitLayer(table[l]!, base.layers_map[l]!, hot));
  const map: RowMap = { version: 1, model, layers, experts, hot_per_layer: hot, layers_map };
  assertRowMap(map);
  return map;
}

function fitLayer(counts: readonly number[], base: LayerRows, hot: number): LayerRows {
  const wasHot = new Set(base.hot);
  const ranked = counts
    .map((c, e) => ({ e, c }))
    .sort((a, b) => b.c - a.c || Number(wasHot.has(b.e)) - Number(wasHot.has(a.e)) || a.e - b.e)
    .map((x) => x.e);
  const top = new Set(ranked.slice(0, hot));
  const promoted = ranked.slice(0, hot).filter((e) => !wasHot.has(e)); // busiest first
  const hotRows = [...base.hot];
  const coldRows = [...base.cold];
  const freedHot = base.hot.map((e, r) => ({ e, r })).filter((x) => !top.has(x.e)); // ascending row
  const freedCold = base.cold.map((e, r) => ({ e, r })).filter((x) => top.has(x.e)).map((x) => x.r); // ascending row
  freedHot.forEach(({ e, r }, i) => {
    hotRows[r] = promoted[i]!;
    coldRows[freedCold[i]!] = e;
  });
  return { hot: hotRows, cold: coldRows };
}
