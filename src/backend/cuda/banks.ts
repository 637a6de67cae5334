// The CUDA expert banks: per layer a hot bank in device memory and a cold bank in mapped pinned host
// memory (read in place by the expert kernel), rows of bf16 gate [I][H] | up [I][H] | down [H][I] exactly
// as stored in the checkpoint. The slot tables live on the device so a swap never invalidates a graph.
import { createHash } from 'node:crypto';
import type { ExpertBanks } from '../backend.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { TensorUploader } from './uploader.ts';
import { layerTensorNames } from '../../model/architecture.ts';
import { placementRows, SlotTables, type BankPlacement } from '../slot-tables.ts';
import type { CudaDriver } from './driver.ts';
import { ResourceScope, type ReleaseFailureSink } from './resource-scope.ts';

export class CudaExpertBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  /** Bytes of one expert row. */
  readonly rowBytes: number;
  readonly hotDev: bigint[] = [];
  readonly coldDev: bigint[] = [];
  /** Device slot tables, [layers][experts] int32 contiguous. */
  readonly slotTableDev: bigint;
  private readonly coldHost: { host: Uint8Array; hostPtr: bigint }[] = [];
  private readonly tables: SlotTables;
  private readonly scratchRow: bigint;
  /** Every device and pinned block of the banks, released in reverse by dispose() or a failed constructor. */
  private readonly scope: ResourceScope;

  constructor(
    private readonly d: CudaDriver,
    spec: ModelSpec,
    uploader: TensorUploader,
    placement?: BankPlacement,
    onReleaseFailure?: ReleaseFailureSink,
  ) {
    const scope = new ResourceScope('cuda expert banks', onReleaseFailure);
    this.scope = scope;
    try {
      // All or nothing: a failed allocation, upload or tensor check releases what was allocated so far.
      const alloc = (bytes: number, what: string): bigint => scope.acquire(what, () => d.alloc(bytes, what), (p) => d.free(p));
      this.layers = spec.numLayers;
      this.experts = spec.numExperts;
      const rows = placementRows(spec, placement);
      this.tables = new SlotTables(rows, spec.numExperts);
      this.hotPerLayer = this.tables.hotPerLayer;
      const part = spec.expertIntermediate * spec.hiddenSize * 2;
      this.rowBytes = 3 * part;
      const E = this.experts;
      this.slotTableDev = alloc(4 * this.layers * E, 'slot tables');
      this.scratchRow = alloc(this.rowBytes, 'swap scratch row');
      const coldRows = E - this.hotPerLayer;
      for (let l = 0; l < this.layers; l++) {
        const names = layerTensorNames(l);
        const { hot, cold } = rows[l]!;
        // Each expert's three matrices go straight to their place in its row: hot rows through the uploader's
        // staging to the device, cold rows read from the shard into the mapped host bank.
        const hotDev = alloc(this.hotPerLayer * this.rowBytes, `hot bank layer ${l} (${this.hotPerLayer} rows)`);
        this.hotDev.push(hotDev);
        hot.forEach((e, r) => {
          const n = names.expert(e);
          [n.gate, n.up, n.down].forEach((name, i) => uploader.toDevice(name, hotDev + BigInt(r * this.rowBytes + i * part), part));
        });
        if (coldRows > 0) {
          const what = `cold bank layer ${l} (${coldRows} rows)`;
          const m = scope.acquire(what, () => d.allocMappedHost(coldRows * this.rowBytes, what), (c) => d.freeHost(c.hostPtr));
          cold.forEach((e, r) => {
            const n = names.expert(e);
            [n.gate, n.up, n.down].forEach((name, i) => {
              const at = r * this.rowBytes + i * part;
              uploader.toHost(name, m.host.subarray(at, at + part), m.dev + BigInt(at));
            });
          });
          this.coldHost.push(m);
          this.coldDev.push(m.dev);
        } else {
          this.coldHost.push({ host: new Uint8Array(0), hostPtr: 0n });
          this.coldDev.push(0n);
        }
        d.htod(this.slotTableDev + BigInt(4 * l * E), this.tables.slots[l]!);
      }
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

  /** Device row copies (hot <-> cold through a scratch row), then the two slots; between steps only. */
  swapRows(layer: number, hotRow: number, coldRow: number): void {
    this.tables.checkSwap(layer, hotRow, coldRow);
    const n = this.rowBytes;
    const hotAt = this.hotDev[layer]! + BigInt(hotRow * n);
    const coldAt = this.coldDev[layer]! + BigInt(coldRow * n);
    this.d.dtod(this.scratchRow, hotAt, n);
    this.d.dtod(hotAt, coldAt, n);
    this.d.dtod(coldAt, this.scratchRow, n);
    this.tables.exchange(layer, hotRow, coldRow);
    this.d.htod(this.slotTableDev + BigInt(4 * layer * this.experts), this.tables.slots[layer]!);
    // The copies above run on the legacy default stream, which does not order the backend's non-blocking
    // compute stream: wait for them here so the next step never reads a half-copied row or slot table.
    this.d.streamSync(0n, 'swapRows');
  }

  digest(): string {
    const h = createHash('sha256');
    const rowsAtOnce = Math.max(1, Math.floor((64 * 1024 * 1024) / this.rowBytes));
    const buf = new Uint8Array(Math.min(this.hotPerLayer, rowsAtOnce) * this.rowBytes);
    for (let l = 0; l < this.layers; l++) {
      // In pieces, so the host never holds a whole layer's hot bank (1.2 GB at Qwen3-30B-A3B shapes).
      for (let r = 0; r < this.hotPerLayer; r += rowsAtOnce) {
        const n = Math.min(rowsAtOnce, this.hotPerLayer - r);
        const part = buf.subarray(0, n * this.rowBytes);
        this.d.dtoh(part, this.hotDev[l]! + BigInt(r * this.rowBytes));
        h.update(part);
      }
      h.update(this.coldHost[l]!.host);
    }
    return h.digest('hex');
  }

  /** Frees every bank block, last allocated first; idempotent; a failed free is reported, the rest still run. */
  dispose(): void {
    this.scope.close();
  }
}
