// The map: which experts sit in the hot bank and which in the cold bank, row by row (design.md section 4).
import { z } from 'zod';
import { ResidencyError } from '../errors.ts';
import { fieldPath } from '../util/field-path.ts';

/** Per layer, expert ids in hot-bank row order and in cold-bank row order. */
export interface LayerRows {
  readonly hot: readonly number[];
  readonly cold: readonly number[];
}

/**
 * The `rowmap` format, version 1. Geometry (the hot count per layer) is part of the contract:
 * keeping it means no re-tuning and no re-allocation. Each expert appears exactly once per layer.
 */
export interface RowMap {
  readonly version: 1;
  readonly model: string;
  readonly layers: number;
  readonly experts: number;
  readonly hot_per_layer: number;
  readonly layers_map: readonly LayerRows[];
}

const idList = z.array(z.number().int());
const rowMapSchema = z.strictObject({
  version: z.literal(1),
  model: z.string(),
  layers: z.number().int().positive(),
  experts: z.number().int().min(2),
  hot_per_layer: z.number().int().positive(),
  layers_map: z.array(z.strictObject({ hot: idList, cold: idList })),
});

/** Validates untrusted JSON as a map: schema first, then the invariants. Throws BAD_MAP naming the field. */
export function parseRowMap(json: unknown, source = 'map'): RowMap {
  const r = rowMapSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new ResidencyError('BAD_MAP', `${source}: ${fieldPath(issue.path, '(root)')}: ${issue.message}`);
  }
  const map = r.data as RowMap;
  const problem = rowMapProblem(map);
  if (problem) throw new ResidencyError('BAD_MAP', `${source}: ${problem}`);
  return map;
}

/**
 * The first broken invariant, or null: geometry is constant (every layer has hot_per_layer hot rows and
 * experts - hot_per_layer cold rows, with at least one of each) and every expert sits exactly once per layer.
 */
export function rowMapProblem(map: RowMap): string | null {
  const { layers, experts, hot_per_layer: hot } = map;
  if (hot >= experts) return `hot_per_layer: ${hot} leaves no cold row (experts ${experts})`;
  if (map.layers_map.length !== layers) return `layers_map: ${map.layers_map.length} layers, expected ${layers}`;
  const seen = new Int32Array(experts);
  for (let l = 0; l < layers; l++) {
    const rows = map.layers_map[l]!;
    if (rows.hot.length !== hot) return `layers_map[${l}].hot: ${rows.hot.length} rows, expected ${hot}`;
    if (rows.cold.length !== experts - hot) {
      return `layers_map[${l}].cold: ${rows.cold.length} rows, expected ${experts - hot}`;
    }
    seen.fill(-1);
    for (const bank of ['hot', 'cold'] as const) {
      const ids = rows[bank];
      for (let i = 0; i < ids.length; i++) {
        const e = ids[i]!;
        const at = `layers_map[${l}].${bank}[${i}]`;
        if (!Number.isInteger(e) || e < 0 || e >= experts) return `${at}: expert ${e} out of range 0..${experts - 1}`;
        if (seen[e] !== -1) return `${at}: expert ${e} appears twice in layer ${l}`;
        seen[e] = 1;
      }
    }
  }
  return null;
}

/** Throws INTERNAL when a map built in-process breaks an invariant (a bug, not bad input). */
export function assertRowMap(map: RowMap): void {
  const problem = rowMapProblem(map);
  if (problem) throw new ResidencyError('INTERNAL', `map invariant broken: ${problem}`);
}

/** Hot rows hold experts 0..hot-1, cold rows the rest, in id order (the default layout). */
export function identityRowMap(model: string, layers: number, experts: number, hot: number): RowMap {
  const layers_map: LayerRows[] = [];
  for (let l = 0; l < layers; l++) {
    layers_map.push({
      hot: Array.from({ length: hot }, (_, i) => i),
      cold: Array.from({ length: experts - hot }, (_, i) => hot + i),
    });
  }
  const map: RowMap = { version: 1, model, layers, experts, hot_per_layer: hot, layers_map };
  assertRowMap(map);
  return map;
}

export function cloneRowMap(map: RowMap): RowMap {
  return { ...map, layers_map: map.layers_map.map((r) => ({ hot: [...r.hot], cold: [...r.cold] })) };
}

export function sameGeometry(a: RowMap, b: RowMap): boolean {
  return a.layers === b.layers && a.experts === b.experts && a.hot_per_layer === b.hot_per_layer;
}

export function rowMapsEqual(a: RowMap, b: RowMap): boolean {
  if (!sameGeometry(a, b)) return false;
  for (let l = 0; l < a.layers; l++) {
    const x = a.layers_map[l]!;
    const y = b.layers_map[l]!;
    if (x.hot.some((e, i) => y.hot[i] !== e) || x.cold.some((e, i) => y.cold[i] !== e)) return false;
  }
  return true;
}

/** Which experts changed bank in one layer, and how many rows hold a different expert. */
export interface LayerDiff {
  readonly layer: number;
  /** Hot in `to`, cold in `from`. */
  readonly promoted: readonly number[];
  /** Cold in `to`, hot in `from`. */
  readonly demoted: readonly number[];
  /** Rows (hot and cold) whose expert differs, including reorderings within a bank. */
  readonly rowsChanged: number;
}

/** Per-layer differences from `from` to `to` (same geometry required). Layers with no change are omitted. */
export function diffRowMaps(from: RowMap, to: RowMap): LayerDiff[] {
  if (!sameGeometry(from, to)) {
    throw new ResidencyError('BAD_MAP', `maps differ in geometry: ${geometry(from)} vs ${geometry(to)}`);
  }
  const out: LayerDiff[] = [];
  for (let l = 0; l < from.layers; l++) {
    const a = from.layers_map[l]!;
    const b = to.layers_map[l]!;
    const aHot = new Set(a.hot);
    const bHot = new Set(b.hot);
    const promoted = b.hot.filter((e) => !aHot.has(e)).sort((x, y) => x - y);
    const demoted = a.hot.filter((e) => !bHot.has(e)).sort((x, y) => x - y);
    let rowsChanged = 0;
    a.hot.forEach((e, i) => { if (b.hot[i] !== e) rowsChanged++; });
    a.cold.forEach((e, i) => { if (b.cold[i] !== e) rowsChanged++; });
    if (rowsChanged > 0) out.push({ layer: l, promoted, demoted, rowsChanged });
  }
  return out;
}

export function geometry(map: RowMap): string {
  return `${map.layers} layers x ${map.experts} experts, ${map.hot_per_layer} hot`;
}

/**
 * slot[layer * experts + expert]: hot row r -> r, cold row c -> hot_per_layer + c (the banks' slot
 * convention in backend.ts).
 */
export function slotTable(map: RowMap): Int32Array {
  const slots = new Int32Array(map.layers * map.experts);
  for (let l = 0; l < map.layers; l++) {
    const rows = map.layers_map[l]!;
    const base = l * map.experts;
    rows.hot.forEach((e, r) => { slots[base + e] = r; });
    rows.cold.forEach((e, c) => { slots[base + e] = map.hot_per_layer + c; });
  }
  return slots;
}

export function serializeRowMap(map: RowMap): string {
  // One layer per line keeps diffs of map files readable.
  const head = JSON.stringify({ ...map, layers_map: undefined }).slice(0, -1);
  const rows = map.layers_map.map((r) => `    ${JSON.stringify({ hot: r.hot, cold: r.cold })}`);
  return `${head},\n  "layers_map": [\n${rows.join(',\n')}\n  ]\n}\n`;
}
