// The CPU expert banks: per layer a hot bank and a cold bank of expert rows (float32, or quantized experts'
// stored bytes: blocks and scales, expert-rows.ts), and the slot table between. Swaps move whole rows and the
// digest hashes every byte, so both cover a quantized row's data and scales alike.
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../errors.ts';
import { InstantMoves, type ExpertBanks, type RowExchange } from '../backend.ts';
import { moeLayerCount, moeLayerIds, type ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, LayerWeights } from '../../model/weights.ts';
import { heapAlloc, type Alloc } from './alloc.ts';
import { placementRows, SlotTables, type BankPlacement } from '../slot-tables.ts';
import { expertRowFormat, quantRowViews, storedRowWriter, writeExpertRow, type QuantRowLayout } from './expert-rows.ts';
import type { TensorSource } from '../../model/tensor-source.ts';
import type { QuantExpert } from './quant-linear.ts';

const NONE = new Float32Array(0);

/** What a taken expert's entry in the loaded weights becomes: its rows live only in a backend's banks. */
export const TAKEN_EXPERT: ExpertWeights = Object.freeze({ gate: NONE, up: NONE, down: NONE });

export class CpuExpertBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** 4-byte words per expert row (expert-rows.ts: float32 values, or the stored bytes of quantized experts). */
  readonly rowSize: number;
  /** The layout of quantized rows (null: float32 rows). */
  readonly quant: QuantRowLayout | null;
  /**
   * Quantized rows only: per bank (bankList order), per row, views of that row's matrices. Swaps move the
   * bytes under them, so a view always reads the expert its slot holds now.
   */
  readonly quantRows: QuantExpert[][];
  /** Per layer: hot bank rows [hotPerLayer][rowSize]. */
  readonly hot: Float32Array[];
  /** Per layer: cold bank rows [experts - hotPerLayer][rowSize]. */
  readonly cold: Float32Array[];
  /** Per layer: expert -> slot (slot < hotPerLayer: hot row; else cold row slot - hotPerLayer). */
  readonly slots: Int32Array[];
  private readonly tables: SlotTables;
  private readonly swapRow: Float32Array;
  private readonly instant = new InstantMoves(this);

  /**
   * `alloc` places the banks (shared memory when worker threads read them: swaps then move bytes in
   * place, and every thread sees them at the next step). `take`: the banks become the experts' only owner:
   * each expert's entry in `layerWeights` is replaced by TAKEN_EXPERT as soon as its row is written, so its
   * arrays can be collected while the next rows are written (host memory then holds one copy of every expert,
   * and never much more than that while the banks fill).
   */
  constructor(spec: ModelSpec, layerWeights: readonly LayerWeights[], placement?: BankPlacement, alloc: Alloc = heapAlloc, take = false) {
    // Only the layers with routed experts have banks: bank layer m holds model layer moeLayerIds(spec)[m].
    this.layers = moeLayerCount(spec);
    const moeIds = moeLayerIds(spec);
    this.experts = spec.numExperts;
    const format = expertRowFormat(spec, moeIds.flatMap((l) => layerWeights[l]!.experts));
    this.rowSize = format.words;
    this.quant = format.quant;
    const rows = placementRows(spec, placement);
    this.tables = new SlotTables(rows, spec.numExperts);
    this.hotPerLayer = this.tables.hotPerLayer;
    this.slots = this.tables.slots;
    this.hot = [];
    this.cold = [];
    this.swapRow = new Float32Array(this.rowSize);
    const I = spec.expertIntermediate;
    const H = spec.hiddenSize;
    this.quantRows = [];
    // Streamed experts (StoredExpert) are read from their checkpoint straight into the rows.
    const writeStored = storedRowWriter(format, I, H);
    const sources = new Set<TensorSource>();
    for (let l = 0; l < this.layers; l++) {
      const { hot, cold } = rows[l]!;
      const hotBank = alloc.f32(hot.length * this.rowSize);
      const coldBank = alloc.f32(cold.length * this.rowSize);
      const experts = layerWeights[moeIds[l]!]!.experts;
      const place = (bank: Float32Array, row: number, expert: number): void => {
        const e = experts[expert]!;
        if (e === TAKEN_EXPERT) throw new ResidencyError('INTERNAL', `expert ${expert} of layer ${moeIds[l]} was already taken by a bank (layers share one experts array?)`);
        if (e.stored) {
          writeStored(bank, row * this.rowSize, e.stored);
          sources.add(e.stored.source);
        } else writeExpertRow(bank, row * this.rowSize, e, format, I, H);
        if (take) (experts as ExpertWeights[])[expert] = TAKEN_EXPERT;
      };
      hot.forEach((e, r) => place(hotBank, r, e));
      cold.forEach((e, r) => place(coldBank, r, e));
      this.hot.push(hotBank);
      this.cold.push(coldBank);
    }
    if (format.quant) this.quantRows.push(...quantRowViews(this.bankList, format.quant, I, H));
    for (const s of sources) s.close(); // the shard files; another backend's reads open them again
  }

  /** Every bank in one list: layer l's hot bank at 2l, its cold bank at 2l+1 (the expert units' bank index). */
  get bankList(): Float32Array[] {
    const list: Float32Array[] = [];
    for (let l = 0; l < this.layers; l++) list.push(this.hot[l]!, this.cold[l]!);
    return list;
  }

  slotOf(layer: number, expert: number): number {
    return this.tables.slotOf(layer, expert);
  }

  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number {
    return this.tables.expertAt(layer, bank, row);
  }

  swapRows(layer: number, hotRow: number, coldRow: number): void {
    this.tables.checkSwap(layer, hotRow, coldRow);
    const hot = this.hot[layer]!;
    const cold = this.cold[layer]!;
    const n = this.rowSize;
    this.swapRow.set(hot.subarray(hotRow * n, hotRow * n + n));
    hot.set(cold.subarray(coldRow * n, coldRow * n + n), hotRow * n);
    cold.set(this.swapRow, coldRow * n);
    this.tables.exchange(layer, hotRow, coldRow);
  }

  /** Host memory: a requested exchange is made at once. */
  requestSwap(layer: number, hotRow: number, coldRow: number): void {
    this.instant.request(layer, hotRow, coldRow);
  }

  takeLanded(): RowExchange[] {
    return this.instant.take();
  }

  get moving(): number {
    return this.instant.moving;
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
}
