// The CPU expert banks: per layer a hot bank and a cold bank of expert rows (float32, or quantized experts'
// stored bytes: blocks and scales, expert-rows.ts), and the slot table between. Swaps move whole rows and the
// digest hashes every byte, so both cover a quantized row's data and scales alike. A bank is held in pieces
// (typed arrays of whole rows, each at most `pieceWords` words): one MoE layer of a DeepSeek-V3-class model is
// 256 x 3 x 2048 x 7168 = 11.3 G floats, past a typed array's 2^32 elements (and a SharedArrayBuffer view's).
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../errors.ts';
import { type ExpertBanks, type RowExchange } from '../backend.ts';
import { InstantMoves } from '../instant-moves.ts';
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

/**
 * Most 4-byte words in one bank piece by default: 2^28 (1 GiB), well inside a typed array's 2^32 elements and
 * the int32 word offsets of the expert units; a row longer than that gets a piece of its own.
 */
export const BANK_PIECE_WORDS = 2 ** 28;
/** Most words a piece may be asked to hold (the units address a row by an int32 word offset within its piece). */
const MAX_PIECE_WORDS = 2 ** 31 - 1;
/** Longest row a piece can hold (one typed array). */
const MAX_ROW_WORDS = 2 ** 32;

export interface CpuBankOptions {
  /**
   * Where the pieces live (shared memory when worker threads read them: swaps then move bytes in place, and
   * every thread sees them at the next step; the wasm arena for the SIMD kernel). Default: the JS heap.
   */
  readonly alloc?: Alloc;
  /**
   * The banks become the experts' only owner: each expert's entry in `layerWeights` is replaced by
   * TAKEN_EXPERT as soon as its row is written, so its arrays can be collected while the next rows are written
   * (host memory then holds one copy of every expert, and never much more than that while the banks fill).
   */
  readonly take?: boolean;
  /** Most words in one piece (default BANK_PIECE_WORDS; tests lower it to run the many-piece path at tiny sizes). */
  readonly pieceWords?: number;
}

export class CpuExpertBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** 4-byte words per expert row (expert-rows.ts: float32 values, or the stored bytes of quantized experts). */
  readonly rowSize: number;
  /** The layout of quantized rows (null: float32 rows). */
  readonly quant: QuantRowLayout | null;
  /** Rows per piece (every piece of a bank holds this many but its last). */
  readonly rowsPerPiece: number;
  /**
   * Every piece of every bank, in bank order: layer 0's hot pieces, its cold pieces, then layer 1's, ...; a
   * bank's rows in order across its pieces. The expert units address a row by its index here and its word
   * offset in the piece (`where`), and the digest hashes the pieces in this order (each bank's bytes in row order).
   */
  readonly pieces: Float32Array[];
  /** Per layer, per slot: [2 slot] the index in `pieces` of the piece holding that slot's row, [2 slot + 1] its word offset there. */
  readonly where: Int32Array[];
  /**
   * Quantized rows only: per piece (`pieces` order), per row, views of that row's matrices. Swaps move the
   * bytes under them, so a view always reads the expert its slot holds now.
   */
  readonly quantRows: QuantExpert[][];
  /** Per layer: expert -> slot (slot < hotPerLayer: hot row; else cold row slot - hotPerLayer). */
  readonly slots: Int32Array[];
  private readonly tables: SlotTables;
  private readonly swapRow: Float32Array;
  private readonly instant = new InstantMoves(this);

  constructor(spec: ModelSpec, layerWeights: readonly LayerWeights[], placement?: BankPlacement, opts: CpuBankOptions = {}) {
    const alloc = opts.alloc ?? heapAlloc;
    const take = opts.take === true;
    // Only the layers with routed experts have banks: bank layer m holds model layer moeLayerIds(spec)[m].
    this.layers = moeLayerCount(spec);
    const moeIds = moeLayerIds(spec);
    this.experts = spec.numExperts;
    const format = expertRowFormat(spec, moeIds.flatMap((l) => layerWeights[l]!.experts));
    this.rowSize = format.words;
    this.quant = format.quant;
    const pieceWords = opts.pieceWords ?? BANK_PIECE_WORDS;
    if (!Number.isInteger(pieceWords) || pieceWords < 1 || pieceWords > MAX_PIECE_WORDS) {
      throw new ResidencyError('BAD_ARGUMENT', `cpu banks: pieceWords ${pieceWords}: expected an integer in [1, ${MAX_PIECE_WORDS}]`);
    }
    if (this.rowSize > MAX_ROW_WORDS) {
      throw new ResidencyError('UNSUPPORTED_MODEL', `cpu banks: one expert row is ${this.rowSize} words, more than a typed array holds (${MAX_ROW_WORDS})`);
    }
    this.rowsPerPiece = Math.max(1, Math.floor(pieceWords / Math.max(1, this.rowSize)));
    const rows = placementRows(spec, placement);
    this.tables = new SlotTables(rows, spec.numExperts);
    this.hotPerLayer = this.tables.hotPerLayer;
    this.slots = this.tables.slots;
    this.pieces = [];
    this.where = [];
    this.swapRow = new Float32Array(this.rowSize);
    const I = spec.expertIntermediate;
    const H = spec.hiddenSize;
    // Streamed experts (StoredExpert) are read from their checkpoint straight into the rows.
    const writeStored = storedRowWriter(format, I, H);
    const sources = new Set<TensorSource>();
    const rpp = this.rowsPerPiece;
    for (let l = 0; l < this.layers; l++) {
      const { hot, cold } = rows[l]!;
      const where = new Int32Array(2 * this.experts);
      const experts = layerWeights[moeIds[l]!]!.experts;
      const fill = (ids: readonly number[], firstSlot: number): void => {
        for (let r0 = 0; r0 < ids.length; r0 += rpp) {
          const n = Math.min(rpp, ids.length - r0);
          const piece = alloc.f32(n * this.rowSize);
          const index = this.pieces.push(piece) - 1;
          for (let k = 0; k < n; k++) {
            const slot = firstSlot + r0 + k;
            where[2 * slot] = index;
            where[2 * slot + 1] = k * this.rowSize;
            const expert = ids[r0 + k]!;
            const e = experts[expert]!;
            if (e === TAKEN_EXPERT) throw new ResidencyError('INTERNAL', `expert ${expert} of layer ${moeIds[l]} was already taken by a bank (layers share one experts array?)`);
            if (e.stored) {
              writeStored(piece, k * this.rowSize, e.stored);
              sources.add(e.stored.source);
            } else writeExpertRow(piece, k * this.rowSize, e, format, I, H);
            if (take) (experts as ExpertWeights[])[expert] = TAKEN_EXPERT;
          }
        }
      };
      fill(hot, 0);
      fill(cold, this.hotPerLayer);
      this.where.push(where);
    }
    this.quantRows = format.quant ? quantRowViews(this.pieces, format.quant, I, H) : [];
    for (const s of sources) s.close(); // the shard files; another backend's reads open them again
  }

  /** A view of one bank row (`row` of layer `layer`'s hot or cold bank): whatever expert that row holds now. */
  row(layer: number, bank: 'hot' | 'cold', row: number): Float32Array {
    this.tables.expertAt(layer, bank, row); // range checks
    const [piece, off] = this.locate(layer, bank === 'hot' ? row : this.hotPerLayer + row);
    return piece.subarray(off, off + this.rowSize);
  }

  /** Bytes held by every bank. */
  get bytes(): number {
    return this.pieces.reduce((a, p) => a + p.byteLength, 0);
  }

  private locate(layer: number, slot: number): [Float32Array, number] {
    const w = this.where[layer]!;
    return [this.pieces[w[2 * slot]!]!, w[2 * slot + 1]!];
  }

  slotOf(layer: number, expert: number): number {
    return this.tables.slotOf(layer, expert);
  }

  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number {
    return this.tables.expertAt(layer, bank, row);
  }

  swapRows(layer: number, hotRow: number, coldRow: number): void {
    this.tables.checkSwap(layer, hotRow, coldRow);
    const [hot, h] = this.locate(layer, hotRow);
    const [cold, c] = this.locate(layer, this.hotPerLayer + coldRow);
    const n = this.rowSize;
    this.swapRow.set(hot.subarray(h, h + n));
    hot.set(cold.subarray(c, c + n), h);
    cold.set(this.swapRow, c);
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

  get startable(): number {
    return this.instant.startable;
  }

  digest(): string {
    // Pieces in bank order: the same bytes in the same order as one array per bank would hash.
    const h = createHash('sha256');
    for (const p of this.pieces) h.update(new Uint8Array(p.buffer, p.byteOffset, p.byteLength));
    return h.digest('hex');
  }
}
