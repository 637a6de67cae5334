// The CUDA expert banks: per layer a hot bank in device memory and a cold bank in mapped pinned host
// memory (read in place by the expert kernel), rows of bf16 gate [I][H] | up [I][H] | down [H][I] exactly
// as stored in the checkpoint. The slot tables live on the device so a swap never invalidates a graph.
import { createHash } from 'node:crypto';
import { ResidencyError } from '../../errors.ts';
import type { ExpertBanks } from '../backend.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { RawTensor } from '../../model/weights.ts';
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
    raw: ReadonlyMap<string, RawTensor>,
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
        const rowOf = (e: number): Uint8Array => {
          const n = names.expert(e);
          const row = new Uint8Array(this.rowBytes);
          [n.gate, n.up, n.down].forEach((name, i) => row.set(bf16(raw, name, part), i * part));
          return row;
        };
        const hotHost = new Uint8Array(this.hotPerLayer * this.rowBytes);
        hot.forEach((e, r) => hotHost.set(rowOf(e), r * this.rowBytes));
        const hotDev = alloc(hotHost.byteLength, `hot bank layer ${l} (${this.hotPerLayer} rows)`);
        d.htod(hotDev, hotHost);
        this.hotDev.push(hotDev);
        if (coldRows > 0) {
          const what = `cold bank layer ${l} (${coldRows} rows)`;
          const m = scope.acquire(what, () => d.allocMappedHost(coldRows * this.rowBytes, what), (c) => d.freeHost(c.hostPtr));
          cold.forEach((e, r) => m.host.set(rowOf(e), r * this.rowBytes));
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
    for (let l = 0; l < this.layers; l++) {
      const hot = new Uint8Array(this.hotPerLayer * this.rowBytes);
      this.d.dtoh(hot, this.hotDev[l]!);
      h.update(hot);
      h.update(this.coldHost[l]!.host);
    }
    return h.digest('hex');
  }

  /** Frees every bank block, last allocated first; idempotent; a failed free is reported, the rest still run. */
  dispose(): void {
    this.scope.close();
  }
}

/** A tensor's bf16 bytes, checked: the device keeps weights exactly as stored. */
export function bf16(raw: ReadonlyMap<string, RawTensor>, name: string, bytes?: number): Uint8Array {
  const t = raw.get(name);
  if (!t) throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} is missing`);
  if (t.dtype !== 'BF16') {
    throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend keeps weights as bf16: tensor ${name} is ${t.dtype}; use --backend cpu`);
  }
  if (bytes !== undefined && t.bytes.byteLength !== bytes) {
    throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} has ${t.bytes.byteLength} bytes: expected ${bytes}`);
  }
  return t.bytes;
}
