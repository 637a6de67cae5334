// The CUDA expert banks: per layer a hot bank in device memory and a cold bank in mapped pinned host
// memory (read in place by the expert kernels), rows of gate [I][H] | up [I][H] | down [H][I] exactly as
// stored in the checkpoint: bf16, or block FP8 values followed by their scale grids (device-weights.ts).
// Moves copy a row's bytes whole, scales with them. The slot tables live on the device so a move never invalidates a graph.
//
// Moves run in the background on a copy stream, through spare hot rows: each layer's hot allocation holds
// hotPerLayer rows plus `spareRows` free ones. An exchange of hot expert A (logical hot row h) and cold expert
// B (cold row c) is two copies, each landing at a step boundary:
//   1. B's cold row -> a spare hot row. Landed: the table points B at it (B is read from HBM from the next step).
//   2. A's hot row -> B's old cold row, queued after the table upload that stopped steps reading it. Landed:
//      the table points A at it, and A's old hot row becomes the spare (free once that upload has run).
// No step reads a row being written, no step waits for a copy, and bytes are only copied, never converted.
// The device slot table holds physical slots: < hotRowsAllocated, a row of the hot allocation; else a cold row.
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../errors.ts';
import type { ExpertBanks, RowExchange } from '../backend.ts';
import { moeLayerCount, moeLayerIds, type ModelSpec } from '../../model/spec.ts';
import type { TensorUploader } from './uploader.ts';
import { expertProduct, type ExpertRowLayout } from './device-weights.ts';
import { moeTensorNames } from '../../model/architecture.ts';
import { placementRows, SlotTables, type BankPlacement } from '../slot-tables.ts';
import type { CudaDriver } from './driver.ts';
import { ResourceScope, type ReleaseFailureSink } from './resource-scope.ts';

export interface CudaBankOptions {
  readonly placement?: BankPlacement;
  /** Free hot rows per layer that moves land in (default 2 when there is a cold bank, else 0). */
  readonly spareRows?: number;
  /** Copies queued on the copy stream at once, all layers together (default DEFAULT_COPIES_IN_FLIGHT): paces moves beside in-place reads. */
  readonly copiesInFlight?: number;
  readonly onReleaseFailure?: ReleaseFailureSink;
}

/** Default spare rows per layer: two exchanges of a layer in flight at once (the policy's default per drain). */
export const DEFAULT_SPARE_ROWS = 2;

/**
 * Default copies queued at once. A copy lands at a step boundary and an exchange is two copies, so this is how many
 * exchanges a step can carry, halved: 2 let the map trail the policy at batch 1 (H200, 16-layer qwen3-30b-a3b, 64/128
 * hot, 1,500-step shift: adaptive 623 / 574 / 528 tok/s with 2, 637 / 632 / 607 with 4, p99 with moves in flight
 * 0.98x the others; bench/tiered/results/h200-2026-12-03d).
 */
export const DEFAULT_COPIES_IN_FLIGHT = 4;

interface Move {
  readonly layer: number;
  readonly hotRow: number;
  readonly coldRow: number;
  readonly leave: number; // the hot expert going cold
  readonly enter: number; // the cold expert coming in
  spare: number; // the spare hot row B lands in (-1 until phase 1 is queued)
  phase: 0 | 1 | 2; // 0 waiting for a spare row / a copy slot; 1, 2 as above
  event: bigint;
}

export class CudaExpertBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** Rows of each layer's hot allocation: hotPerLayer plus the spare rows. */
  readonly hotRowsAllocated: number;
  readonly spareRows: number;
  /** Bytes of one expert row. */
  readonly rowBytes: number;
  readonly hotDev: bigint[] = [];
  readonly coldDev: bigint[] = [];
  /** Device slot tables, [layers][experts] int32 contiguous, physical slots (see the header). */
  readonly slotTableDev: bigint;
  private readonly coldHost: { host: Uint8Array; hostPtr: bigint }[] = [];
  /** Logical placement: what the controller and the contract see. */
  private readonly tables: SlotTables;
  /** Per layer, expert -> physical slot (what the device table holds); its pinned mirror is the upload source. */
  private readonly phys: Int32Array[] = [];
  private readonly physHost: { host: Uint8Array; hostPtr: bigint };
  /** Per layer, free rows of the hot allocation. */
  private readonly spare: number[][] = [];
  private readonly moves: Move[] = [];
  private landed: RowExchange[] = [];
  private readonly copyStream: bigint;
  /** Recorded on the compute stream after each table upload: copies into rows it freed wait for it. */
  private readonly tableEvent: bigint;
  private readonly freeEvents: bigint[] = [];
  private readonly copiesInFlight: number;
  private copiesQueued = 0;
  /** Every device and pinned block of the banks, released in reverse by dispose() or a failed constructor. */
  private readonly scope: ResourceScope;

  constructor(
    private readonly d: CudaDriver,
    spec: ModelSpec,
    uploader: TensorUploader,
    /** The experts' bank row as stored (device-weights.ts expertRowLayout). */
    row: ExpertRowLayout,
    /** The backend's compute stream: table uploads are ordered with its steps. */
    private readonly computeStream: bigint,
    opts: CudaBankOptions = {},
  ) {
    const scope = new ResourceScope('cuda expert banks', opts.onReleaseFailure);
    this.scope = scope;
    try {
      // All or nothing: a failed allocation, upload or tensor check releases what was allocated so far.
      const alloc = (bytes: number, what: string): bigint => scope.acquire(what, () => d.alloc(bytes, what), (p) => d.free(p));
      // Only the layers with routed experts have banks (index m is model layer moeLayers[m]).
      this.layers = moeLayerCount(spec);
      const modelLayer = moeLayerIds(spec);
      this.experts = spec.numExperts;
      const rows = placementRows(spec, opts.placement);
      this.tables = new SlotTables(rows, spec.numExperts);
      this.hotPerLayer = this.tables.hotPerLayer;
      const E = this.experts;
      const coldRows = E - this.hotPerLayer;
      this.spareRows = coldRows > 0 ? opts.spareRows ?? DEFAULT_SPARE_ROWS : 0;
      if (!Number.isInteger(this.spareRows) || this.spareRows < 0 || (coldRows > 0 && this.spareRows < 1)) {
        throw new ResidencyError('BAD_ARGUMENT', `spareRows ${opts.spareRows}: expected an integer >= 1 with a cold bank`);
      }
      this.copiesInFlight = opts.copiesInFlight ?? DEFAULT_COPIES_IN_FLIGHT;
      if (!Number.isInteger(this.copiesInFlight) || this.copiesInFlight < 1) {
        throw new ResidencyError('BAD_ARGUMENT', `copiesInFlight ${opts.copiesInFlight}: expected an integer >= 1`);
      }
      this.hotRowsAllocated = this.hotPerLayer + this.spareRows;
      this.rowBytes = row.bytes;
      this.slotTableDev = alloc(4 * this.layers * E, 'slot tables');
      this.physHost = scope.acquire('pinned slot tables', () => d.allocPinned(4 * this.layers * E, 'slot tables'), (h) => d.freeHost(h.hostPtr));
      // The copy stream and its table event exist only with a cold bank (nothing ever moves without one).
      this.copyStream = coldRows > 0 ? scope.acquire('copy stream', () => d.streamCreate(), (s) => d.streamDestroy(s)) : 0n;
      this.tableEvent = coldRows > 0 ? scope.acquire('table event', () => d.eventCreate(), (e) => d.eventDestroy(e)) : 0n;
      const products = (l: number, e: number) => {
        const n = moeTensorNames(spec, modelLayer[l]!).expert(e);
        return [
          { p: expertProduct(row.gateUp, n, 'gateUp'), at: row.gateUpAt, grid: row.gateUpGridAt },
          { p: expertProduct(row.down, n, 'down'), at: row.downAt, grid: row.downGridAt },
        ];
      };
      // Expert e's row to the device at `dev`, or into the mapped cold bank at host[base..] (device address m.dev).
      const toDevice = (l: number, e: number, dev: bigint): void => {
        const slices = row.slices?.(modelLayer[l]!, e);
        if (slices) for (const x of slices) uploader.sliceToDevice(x, dev + BigInt(x.at));
        else for (const x of products(l, e)) uploader.productToDevice(x.p, dev + BigInt(x.at), dev + BigInt(x.grid));
      };
      const toHost = (l: number, e: number, m: { host: Uint8Array; dev: bigint }, base: number): void => {
        const slices = row.slices?.(modelLayer[l]!, e);
        if (slices) {
          for (const x of slices) uploader.sliceToHost(x, m.host.subarray(base + x.at, base + x.at + x.bytes), m.dev + BigInt(base + x.at));
          return;
        }
        for (const x of products(l, e)) {
          const grid = x.p.grid ? m.host.subarray(base + x.grid, base + x.grid + x.p.grid.bytes) : undefined;
          uploader.productToHost(x.p, m.host.subarray(base + x.at, base + x.at + x.p.dataBytes), m.dev + BigInt(base + x.at), grid);
        }
      };
      for (let l = 0; l < this.layers; l++) {
        const { hot, cold } = rows[l]!;
        // Each expert's three matrices go straight to their place in its row: hot rows through the uploader's
        // staging to the device, cold rows read from the shard into the mapped host bank.
        const hotDev = alloc(this.hotRowsAllocated * this.rowBytes, `hot bank layer ${l} (${this.hotPerLayer} rows + ${this.spareRows} spare)`);
        this.hotDev.push(hotDev);
        hot.forEach((e, r) => toDevice(l, e, hotDev + BigInt(r * this.rowBytes)));
        if (coldRows > 0) {
          const what = `cold bank layer ${l} (${coldRows} rows)`;
          const m = scope.acquire(what, () => d.allocMappedHost(coldRows * this.rowBytes, what), (c) => d.freeHost(c.hostPtr));
          cold.forEach((e, r) => toHost(l, e, m, r * this.rowBytes));
          this.coldHost.push(m);
          this.coldDev.push(m.dev);
        } else {
          this.coldHost.push({ host: new Uint8Array(0), hostPtr: 0n });
          this.coldDev.push(0n);
        }
        // Physical = logical at start; cold slots sit after the whole hot allocation.
        const p = new Int32Array(this.physHost.host.buffer, this.physHost.host.byteOffset + 4 * l * E, E);
        hot.forEach((e, r) => { p[e] = r; });
        cold.forEach((e, r) => { p[e] = this.hotRowsAllocated + r; });
        this.phys.push(p);
        this.spare.push(Array.from({ length: this.spareRows }, (_, i) => this.hotPerLayer + i));
      }
      d.htod(this.slotTableDev, this.physHost.host);
    } catch (e) {
      throw scope.unwind(e);
    }
  }

  slotOf(layer: number, expert: number): number {
    return this.tables.slotOf(layer, expert);
  }

  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number {
    return this.tables.expertAt(layer, bank, row);
  }

  get moving(): number {
    return this.moves.length;
  }

  /** Copy slots free, less the exchanges already waiting for one (or for a spare row of their layer). */
  get startable(): number {
    let waiting = 0;
    for (const m of this.moves) if (m.phase === 0) waiting++;
    return Math.max(0, this.copiesInFlight - this.copiesQueued - waiting);
  }

  /** The exchange at once: requested, then waited for (placement before serving; tests). */
  swapRows(layer: number, hotRow: number, coldRow: number): void {
    if (this.moves.length > 0) throw new ResidencyError('INTERNAL', `swapRows: ${this.moves.length} moves are in flight; wait for them to land first`);
    this.requestSwap(layer, hotRow, coldRow);
    const before = this.landed.length;
    while (this.moves.length > 0) {
      const m = this.moves[0]!;
      if (m.phase > 0) this.d.eventSync(m.event);
      this.advance();
    }
    this.landed.splice(before); // landed now, not reported later
    this.d.streamSync(this.computeStream, 'swapRows');
  }

  requestSwap(layer: number, hotRow: number, coldRow: number): void {
    this.tables.checkSwap(layer, hotRow, coldRow);
    const leave = this.tables.expertAt(layer, 'hot', hotRow);
    const enter = this.tables.expertAt(layer, 'cold', coldRow);
    for (const m of this.moves) {
      if (m.layer === layer && (m.hotRow === hotRow || m.coldRow === coldRow)) {
        throw new ResidencyError('BAD_ARGUMENT', `requestSwap: layer ${layer} hot row ${hotRow} or cold row ${coldRow} is already moving`);
      }
    }
    this.moves.push({ layer, hotRow, coldRow, leave, enter, spare: -1, phase: 0, event: 0n });
    this.advance();
  }

  takeLanded(): RowExchange[] {
    this.advance();
    const out = this.landed;
    this.landed = [];
    return out;
  }

  /**
   * Moves every move whose copy completed to its next phase, uploads the changed tables on the compute stream
   * (before the next step), then queues the copies that may start. Never blocks.
   */
  private advance(): void {
    const dirty = new Set<number>();
    const freed: { layer: number; row: number }[] = [];
    const phase2: Move[] = [];
    for (const m of [...this.moves]) {
      if (m.phase === 0 || !this.d.eventDone(m.event)) continue;
      this.copiesQueued--;
      const p = this.phys[m.layer]!;
      if (m.phase === 1) {
        // B is in the spare row: point it there. Its old cold row is written by phase 2 after this upload.
        const oldCold = p[m.enter]!;
        p[m.enter] = m.spare;
        m.spare = oldCold; // phase 2's destination
        phase2.push(m);
      } else {
        // A is in B's old cold row: point it there; A's old hot row becomes a spare once the upload has run.
        freed.push({ layer: m.layer, row: p[m.leave]! });
        p[m.leave] = m.spare;
        this.tables.exchange(m.layer, m.hotRow, m.coldRow);
        this.moves.splice(this.moves.indexOf(m), 1);
        this.freeEvents.push(m.event);
        this.landed.push({ layer: m.layer, hotRow: m.hotRow, coldRow: m.coldRow });
      }
      dirty.add(m.layer);
    }
    if (dirty.size > 0) {
      const E = this.experts;
      for (const l of dirty) {
        this.d.htodAsync(this.slotTableDev + BigInt(4 * l * E), this.physHost.hostPtr + BigInt(4 * l * E), 4 * E, this.computeStream);
      }
      this.d.eventRecord(this.tableEvent, this.computeStream);
      for (const f of freed) this.spare[f.layer]!.push(f.row);
    }
    for (const m of phase2) {
      m.phase = 2;
      this.copy(m, this.coldDev[m.layer]! + this.coldOffset(m.spare), this.hotAt(m.layer, this.phys[m.layer]![m.leave]!));
    }
    // Phase 1 of waiting moves, oldest first, while a spare row and a copy slot are free.
    for (const m of this.moves) {
      if (m.phase !== 0 || this.copiesQueued >= this.copiesInFlight) continue;
      const row = this.spare[m.layer]!.shift();
      if (row === undefined) continue;
      m.spare = row;
      m.phase = 1;
      this.copy(m, this.hotAt(m.layer, row), this.coldDev[m.layer]! + this.coldOffset(this.phys[m.layer]![m.enter]!));
    }
  }

  /** One copy of a row on the copy stream, after the last table upload (rows it freed are not read any more). */
  private copy(m: Move, dst: bigint, src: bigint): void {
    this.d.streamWaitEvent(this.copyStream, this.tableEvent);
    this.d.copyAsync(dst, src, this.rowBytes, this.copyStream);
    if (m.event === 0n) m.event = this.freeEvents.pop() ?? this.scope.acquire('move event', () => this.d.eventCreate(), (e) => this.d.eventDestroy(e));
    this.d.eventRecord(m.event, this.copyStream);
    this.copiesQueued++;
  }

  private hotAt(layer: number, row: number): bigint {
    return this.hotDev[layer]! + BigInt(row * this.rowBytes);
  }

  private coldOffset(physSlot: number): bigint {
    return BigInt((physSlot - this.hotRowsAllocated) * this.rowBytes);
  }

  /** Host addresses of each layer's cold bank (0 where a layer has none): what the host expert lane reads. */
  coldHostAddresses(): bigint[] {
    return this.coldHost.map((c) => c.hostPtr);
  }

  /** The mapped host bytes of logical cold row `row` of `layer` (what the kernels read in place for its expert). */
  coldRowBytes(layer: number, row: number): Uint8Array {
    const at = Number(this.coldOffset(this.phys[layer]![this.tables.expertAt(layer, 'cold', row)]!));
    return this.coldHost[layer]!.host.subarray(at, at + this.rowBytes);
  }

  /** A content hash of every layer's hot then cold rows in logical row order (independent of the spare rows' rotation). */
  digest(): string {
    if (this.moves.length > 0) throw new ResidencyError('INTERNAL', `digest: ${this.moves.length} moves are in flight`);
    this.d.streamSync(this.computeStream, 'digest');
    const h = createHash('sha256');
    const buf = new Uint8Array(this.rowBytes);
    for (let l = 0; l < this.layers; l++) {
      for (let r = 0; r < this.hotPerLayer; r++) {
        this.d.dtoh(buf, this.hotAt(l, this.phys[l]![this.tables.expertAt(l, 'hot', r)]!));
        h.update(buf);
      }
      h.update(this.coldHost[l]!.host);
    }
    return h.digest('hex');
  }

  /** Frees every bank block, last allocated first; idempotent; a failed free is reported, the rest still run. */
  dispose(): void {
    if (!this.scope.closed && this.copyStream !== 0n) this.scope.defer('wait for the copy stream', () => this.d.streamSync(this.copyStream, 'banks dispose'));
    this.scope.close();
  }
}
