// The CPU expert banks: per layer a hot bank and a cold bank of expert rows, and the slot table between.
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../errors.ts';
import type { ExpertBanks } from '../backend.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { LayerWeights } from '../../model/weights.ts';
import type { RowMap } from '../../residency/rowmap.ts';
import { heapAlloc, type Alloc } from './alloc.ts';

/**
 * Where experts start: every expert hot (the default), the first `hotPerLayer` experts of each layer hot
 * (in expert order), or an explicit map. Placement never changes a result.
 */
export type BankPlacement = { readonly hotPerLayer: number } | RowMap;

/** Floats in one expert row: gate [I][H] | up [I][H] | down [H][I]. */
export function expertRowSize(spec: ModelSpec): number {
  return 3 * spec.expertIntermediate * spec.hiddenSize;
}

export class CpuExpertBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  readonly rowSize: number;
  /** Per layer: hot bank rows [hotPerLayer][rowSize]. */
  readonly hot: Float32Array[];
  /** Per layer: cold bank rows [experts - hotPerLayer][rowSize]. */
  readonly cold: Float32Array[];
  /** Per layer: expert -> slot (slot < hotPerLayer: hot row; else cold row slot - hotPerLayer). */
  readonly slots: Int32Array[];
  /** Per layer: slot -> expert (the inverse table). */
  private readonly holders: Int32Array[];
  private readonly swapRow: Float32Array;

  /**
   * `alloc` places the banks (shared memory when worker threads read them: swaps then move bytes in
   * place, and every thread sees them at the next step).
   */
  constructor(spec: ModelSpec, layerWeights: readonly LayerWeights[], placement?: BankPlacement, alloc: Alloc = heapAlloc) {
    this.layers = spec.numLayers;
    this.experts = spec.numExperts;
    this.rowSize = expertRowSize(spec);
    const rows = placementRows(spec, placement);
    this.hotPerLayer = rows[0]?.hot.length ?? spec.numExperts;
    this.hot = [];
    this.cold = [];
    this.slots = [];
    this.holders = [];
    this.swapRow = new Float32Array(this.rowSize);
    const gateSize = spec.expertIntermediate * spec.hiddenSize;
    for (let l = 0; l < this.layers; l++) {
      const { hot, cold } = rows[l]!;
      const hotBank = alloc.f32(hot.length * this.rowSize);
      const coldBank = alloc.f32(cold.length * this.rowSize);
      const slots = new Int32Array(this.experts);
      const holders = new Int32Array(this.experts);
      const place = (bank: Float32Array, row: number, expert: number, slot: number): void => {
        const w = layerWeights[l]!.experts[expert]!;
        const off = row * this.rowSize;
        bank.set(w.gate, off);
        bank.set(w.up, off + gateSize);
        bank.set(w.down, off + 2 * gateSize);
        slots[expert] = slot;
        holders[slot] = expert;
      };
      hot.forEach((e, r) => place(hotBank, r, e, r));
      cold.forEach((e, r) => place(coldBank, r, e, hot.length + r));
      this.hot.push(hotBank);
      this.cold.push(coldBank);
      this.slots.push(slots);
      this.holders.push(holders);
    }
  }

  /** Every bank in one list: layer l's hot bank at 2l, its cold bank at 2l+1 (the expert units' bank index). */
  get bankList(): Float32Array[] {
    const list: Float32Array[] = [];
    for (let l = 0; l < this.layers; l++) list.push(this.hot[l]!, this.cold[l]!);
    return list;
  }

  slotOf(layer: number, expert: number): number {
    this.check(layer, 'layer', this.layers);
    this.check(expert, 'expert', this.experts);
    return this.slots[layer]![expert]!;
  }

  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number {
    this.check(layer, 'layer', this.layers);
    const rows = bank === 'hot' ? this.hotPerLayer : this.experts - this.hotPerLayer;
    this.check(row, `${bank} row`, rows);
    return this.holders[layer]![bank === 'hot' ? row : this.hotPerLayer + row]!;
  }

  swapRows(layer: number, hotRow: number, coldRow: number): void {
    this.check(layer, 'layer', this.layers);
    this.check(hotRow, 'hot row', this.hotPerLayer);
    this.check(coldRow, 'cold row', this.experts - this.hotPerLayer);
    const hot = this.hot[layer]!;
    const cold = this.cold[layer]!;
    const n = this.rowSize;
    this.swapRow.set(hot.subarray(hotRow * n, hotRow * n + n));
    hot.set(cold.subarray(coldRow * n, coldRow * n + n), hotRow * n);
    cold.set(this.swapRow, coldRow * n);
    const holders = this.holders[layer]!;
    const slots = this.slots[layer]!;
    const hotSlot = hotRow;
    const coldSlot = this.hotPerLayer + coldRow;
    const wasHot = holders[hotSlot]!;
    const wasCold = holders[coldSlot]!;
    holders[hotSlot] = wasCold;
    holders[coldSlot] = wasHot;
    slots[wasCold] = hotSlot;
    slots[wasHot] = coldSlot;
  }

  digest(): string {
    const h = createHash('sha256');
    for (let l = 0; l < this.layers; l++) {
      const hot = this.hot[l]!;
      const cold = this.cold[l]!;
      h.update(new Uint8Array(hot.buffer, hot.byteOffset, hot.byteLength));
      h.update(new Uint8Array(cold.buffer, cold.byteOffset, cold.byteLength));
    }
    return h.digest('hex');
  }

  private check(v: number, what: string, bound: number): void {
    if (!Number.isInteger(v) || v < 0 || v >= bound) {
      throw new ResidencyError('BAD_ARGUMENT', `${what} ${v} is out of range: expected an integer in [0, ${bound})`);
    }
  }
}

/** Per-layer hot/cold expert lists for a placement, validated: each layer a partition of 0..E-1, one hot count. */
export function placementRows(spec: ModelSpec, placement?: BankPlacement): { hot: number[]; cold: number[] }[] {
  const E = spec.numExperts;
  const L = spec.numLayers;
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
