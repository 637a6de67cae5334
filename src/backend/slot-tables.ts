// What every backend's expert banks share: where experts start (the placement) and the slot tables
// (per layer expert -> slot and slot -> expert), with the range checks. The bytes are each backend's own.
import { ResidencyError } from '../errors.ts';
import { moeLayerCount, type ModelSpec } from '../model/spec.ts';
import type { RowMap } from '../residency/rowmap.ts';

/**
 * Where experts start: every expert hot (the default), the first `hotPerLayer` experts of each layer hot
 * (in expert order), or an explicit map. Placement never changes a result.
 */
export type BankPlacement = { readonly hotPerLayer: number } | RowMap;

/**
 * Per layer, expert -> slot (slot < hotPerLayer: hot row `slot`; else cold row `slot - hotPerLayer`) and its
 * inverse. A swap exchanges the two rows' experts; the backend moves the bytes.
 */
export class SlotTables {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** Per layer: expert -> slot. */
  readonly slots: Int32Array[] = [];
  /** Per layer: slot -> expert. */
  private readonly holders: Int32Array[] = [];

  constructor(rows: readonly { readonly hot: readonly number[]; readonly cold: readonly number[] }[], experts: number) {
    this.layers = rows.length;
    this.experts = experts;
    this.hotPerLayer = rows[0]?.hot.length ?? experts;
    for (const { hot, cold } of rows) {
      const slots = new Int32Array(experts);
      const holders = new Int32Array(experts);
      hot.forEach((e, r) => { slots[e] = r; holders[r] = e; });
      cold.forEach((e, r) => { slots[e] = this.hotPerLayer + r; holders[this.hotPerLayer + r] = e; });
      this.slots.push(slots);
      this.holders.push(holders);
    }
  }

  slotOf(layer: number, expert: number): number {
    check(layer, 'layer', this.layers);
    check(expert, 'expert', this.experts);
    return this.slots[layer]![expert]!;
  }

  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number {
    check(layer, 'layer', this.layers);
    check(row, `${bank} row`, bank === 'hot' ? this.hotPerLayer : this.experts - this.hotPerLayer);
    return this.holders[layer]![bank === 'hot' ? row : this.hotPerLayer + row]!;
  }

  /** Throws BAD_ARGUMENT unless (layer, hotRow, coldRow) names a hot row and a cold row. */
  checkSwap(layer: number, hotRow: number, coldRow: number): void {
    check(layer, 'layer', this.layers);
    check(hotRow, 'hot row', this.hotPerLayer);
    check(coldRow, 'cold row', this.experts - this.hotPerLayer);
  }

  /** The two experts trade slots (call once the rows' bytes have been exchanged). */
  exchange(layer: number, hotRow: number, coldRow: number): void {
    const holders = this.holders[layer]!;
    const slots = this.slots[layer]!;
    const coldSlot = this.hotPerLayer + coldRow;
    const wasHot = holders[hotRow]!;
    const wasCold = holders[coldSlot]!;
    holders[hotRow] = wasCold;
    holders[coldSlot] = wasHot;
    slots[wasCold] = hotRow;
    slots[wasHot] = coldSlot;
  }
}

function check(v: number, what: string, bound: number): void {
  if (!Number.isInteger(v) || v < 0 || v >= bound) {
    throw new ResidencyError('BAD_ARGUMENT', `${what} ${v} is out of range: expected an integer in [0, ${bound})`);
  }
}

/** Per-layer hot/cold expert lists for a placement, validated: each layer a partition of 0..E-1, one hot count. */
export function placementRows(spec: ModelSpec, placement?: BankPlacement): { hot: number[]; cold: number[] }[] {
  const E = spec.numExperts;
  const L = moeLayerCount(spec); // layers with routed experts only
  if (placement === undefined || !('layers_map' in placement)) {
    const h = placement?.hotPerLayer ?? E;
    if (!Number.isInteger(h) || h < 0 || h > E) {
      throw new ResidencyError('BAD_MAP', `hotPerLayer ${h} is invalid: expected an integer in [0, ${E}]`);
    }
    const ids = Array.from({ length: E }, (_, e) => e);
    return Array.from({ length: L }, () => ({ hot: ids.slice(0, h), cold: ids.slice(h) }));
  }
  const map = placement;
  if (map.layers !== L || map.experts !== E) {
    throw new ResidencyError(
      'BAD_MAP',
      `map geometry ${map.layers} layers x ${map.experts} experts does not match the model (${L} x ${E})`,
    );
  }
  if (!Array.isArray(map.layers_map) || map.layers_map.length !== L) {
    throw new ResidencyError('BAD_MAP', `layers_map: expected ${L} entries, got ${map.layers_map?.length}`);
  }
  return map.layers_map.map((rows, l) => {
    if (rows.hot.length !== map.hot_per_layer) {
      throw new ResidencyError(
        'BAD_MAP',
        `layers_map[${l}].hot has ${rows.hot.length} experts: expected hot_per_layer = ${map.hot_per_layer}`,
      );
    }
    const seen = new Uint8Array(E);
    for (const e of [...rows.hot, ...rows.cold]) {
      if (!Number.isInteger(e) || e < 0 || e >= E) {
        throw new ResidencyError('BAD_MAP', `layers_map[${l}]: expert id ${e} out of range [0, ${E})`);
      }
      if (seen[e]) throw new ResidencyError('BAD_MAP', `layers_map[${l}]: expert ${e} appears more than once`);
      seen[e] = 1;
    }
    if (rows.hot.length + rows.cold.length !== E) {
      throw new ResidencyError(
        'BAD_MAP',
        `layers_map[${l}]: hot + cold hold ${rows.hot.length + rows.cold.length} experts: expected all ${E}`,
      );
    }
    return { hot: [...rows.hot], cold: [...rows.cold] };
  });
}
