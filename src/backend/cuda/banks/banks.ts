// The CUDA expert banks: per layer a hot bank in device memory and a cold bank in mapped pinned host
// memory (read in place by the expert kernels), rows of gate [I][H] | up [I][H] | down [H][I] exactly as
// stored in the checkpoint: bf16, or block FP8 values followed by their scale grids (device-weights.ts).
// Moves copy a row's bytes whole, scales with them. The slot tables live on the device so a move never invalidates a graph.
//
// Moves run in the background on a copy stream, through spare hot rows (each layer's hot allocation holds
// hotPerLayer rows plus `spareRows` free ones), on the schedule of ../move-pipeline.ts: an exchange of hot expert A
// and cold expert B is two copies, each landing at a step boundary:
//   1. B's cold row -> a spare hot row. Landed: the table points B at it (B is read from HBM from the next step).
//   2. A's hot row -> B's old cold row, queued after the table upload that stopped steps reading it. Landed:
//      the table points A at it, and A's old hot row becomes the spare (free once that upload has run).
// No step reads a row being written, no step waits for a copy, and bytes are only copied, never converted.
// The device slot table holds physical slots: < hotRowsAllocated, a row of the hot allocation; else a cold row.
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../../errors.ts';
import type { ExpertBanks, RowExchange } from '../../backend.ts';
import { moeLayerCount, moeLayerIds, type ModelSpec } from '../../../model/spec.ts';
import type { TensorUploader } from '../weights/uploader.ts';
import { expertProduct, type ExpertRowLayout } from '../weights/device-weights.ts';
import { moeTensorNames } from '../../../model/architecture.ts';
import { placementRows, SlotTables, type BankPlacement } from '../../slot-tables.ts';
import type { CudaDriver } from '../driver/driver.ts';
import { ResourceScope, type ReleaseFailureSink } from '../driver/resource-scope.ts';
import { DEFAULT_COPIES_IN_FLIGHT, DEFAULT_SPARE_ROWS, MovePipeline, type MoveSteps, type PipelineMove } from '../../move-pipeline.ts';

export interface CudaBankOptions {
  readonly placement?: BankPlacement;
  /** Free hot rows per layer that moves land in (default 2 when there is a cold bank, else 0). */
  readonly spareRows?: number;
  /** Copies queued on the copy stream at once, all layers together (default DEFAULT_COPIES_IN_FLIGHT): paces moves beside in-place reads. */
  readonly copiesInFlight?: number;
  readonly onReleaseFailure?: ReleaseFailureSink;
}

interface Move extends PipelineMove {
  event: bigint; // recorded after the move's last queued copy
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
  /** The moves in flight and each layer's free rows of the hot allocation. */
  private readonly pipeline: MovePipeline<Move>;
  private readonly steps: MoveSteps<Move>;
  private landed: RowExchange[] = [];
  private readonly copyStream: bigint;
  /** Recorded on the compute stream after each table upload: copies into rows it freed wait for it. */
  private readonly tableEvent: bigint;
  private readonly freeEvents: bigint[] = [];
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
      const spare: number[][] = [];
      this.pipeline = new MovePipeline(spare, opts.copiesInFlight ?? DEFAULT_COPIES_IN_FLIGHT);
      this.steps = this.moveSteps();
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
        spare.push(Array.from({ length: this.spareRows }, (_, i) => this.hotPerLayer + i));
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
    return this.pipeline.moving;
  }

  get startable(): number {
    return this.pipeline.startable;
  }

  /** The exchange at once: requested, then waited for (placement before serving; tests). */
  swapRows(layer: number, hotRow: number, coldRow: number): void {
    if (this.pipeline.moving > 0) throw new ResidencyError('INTERNAL', `swapRows: ${this.pipeline.moving} moves are in flight; wait for them to land first`);
    this.requestSwap(layer, hotRow, coldRow);
    const before = this.landed.length;
    while (this.pipeline.moving > 0) {
      this.d.streamSync(this.copyStream, 'swapRows');
      this.advance();
    }
    this.landed.splice(before); // landed now, not reported later
    this.d.streamSync(this.computeStream, 'swapRows');
  }

  requestSwap(layer: number, hotRow: number, coldRow: number): void {
    this.tables.checkSwap(layer, hotRow, coldRow);
    const leave = this.tables.expertAt(layer, 'hot', hotRow);
    const enter = this.tables.expertAt(layer, 'cold', coldRow);
    this.pipeline.request({ layer, hotRow, coldRow, leave, enter, spare: -1, phase: 0, event: 0n });
    this.advance();
  }

  takeLanded(): RowExchange[] {
    this.advance();
    const out = this.landed;
    this.landed = [];
    return out;
  }

  /** Lands the moves whose copies completed, uploads the changed tables (before the next step), queues the next copies. Never blocks. */
  private advance(): void {
    this.landed.push(...this.pipeline.advance(this.steps));
  }

  /** The pipeline's steps on this device: copies on the copy stream, the physical slot tables uploaded on the compute stream. */
  private moveSteps(): MoveSteps<Move> {
    return {
      copyDone: (m) => this.d.eventDone(m.event),
      copyIn: (m) => this.copy(m, this.hotAt(m.layer, m.spare), this.coldDev[m.layer]! + this.coldOffset(this.phys[m.layer]![m.enter]!)),
      landIn: (m) => {
        // B is in the spare row: point it there. Its old cold row is phase 2's destination, written after this upload.
        const p = this.phys[m.layer]!;
        const oldCold = p[m.enter]!;
        p[m.enter] = m.spare;
        m.spare = oldCold;
      },
      copyOut: (m) => this.copy(m, this.coldDev[m.layer]! + this.coldOffset(m.spare), this.hotAt(m.layer, this.phys[m.layer]![m.leave]!)),
      landOut: (m) => {
        // A is in B's old cold row: point it there; A's old hot row becomes a spare once the upload has run.
        const p = this.phys[m.layer]!;
        const left = p[m.leave]!;
        p[m.leave] = m.spare;
        this.tables.exchange(m.layer, m.hotRow, m.coldRow);
        this.freeEvents.push(m.event);
        m.event = 0n;
        return left;
      },
      landed: (layers) => {
        const E = this.experts;
        for (const l of layers) {
          this.d.htodAsync(this.slotTableDev + BigInt(4 * l * E), this.physHost.hostPtr + BigInt(4 * l * E), 4 * E, this.computeStream);
        }
        this.d.eventRecord(this.tableEvent, this.computeStream);
      },
    };
  }

  /** One copy of a row on the copy stream, after the last table upload (rows it freed are not read any more). */
  private copy(m: Move, dst: bigint, src: bigint): void {
    this.d.streamWaitEvent(this.copyStream, this.tableEvent);
    this.d.copyAsync(dst, src, this.rowBytes, this.copyStream);
    if (m.event === 0n) m.event = this.freeEvents.pop() ?? this.scope.acquire('move event', () => this.d.eventCreate(), (e) => this.d.eventDestroy(e));
    this.d.eventRecord(m.event, this.copyStream);
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
    if (this.pipeline.moving > 0) throw new ResidencyError('INTERNAL', `digest: ${this.pipeline.moving} moves are in flight`);
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
