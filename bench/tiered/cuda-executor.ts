// The GPU executor of the tiered benchmark: hot bank in HBM, host bank in mapped pinned host memory read in
// place by the kernels (the cold rows, or with geometry.moves 'mirror' a mirror of every expert row), staging
// rows in HBM (none in mirror mode); one compute stream (timed with CUDA events per step) and one
// copy stream for row exchanges. Steps run one at a time (the host waits for each step's end event).
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadDriver, type CudaDriver, type KernelArg } from '../../src/backend/cuda/driver.ts';
import { loadExtra, type CudaExtra } from './cuda-extra.ts';
import type { StepTimes, TieredExecutor } from './executor.ts';
import { hostRowsPerLayer, moveMode, rowBytes, type TieredGeometry } from './geometry.ts';
import { ITEM_INTS, MAXT, type StepPlan } from './plan.ts';
import type { RowCopy } from './rows.ts';

export interface CudaExecutorOptions {
  readonly log?: (s: string) => void;
  /** Allocate probe buffers for self checks (small geometries). */
  readonly check?: boolean;
  readonly fatbin?: string;
}

const EVENT_RING = 512;

function findFatbin(explicit?: string): string {
  const c = [explicit, process.env['TIERED_FATBIN'], fileURLToPath(new URL('./tiered.fatbin', import.meta.url)), 'dist-tiered/tiered.fatbin']
    .filter((x): x is string => !!x);
  for (const p of c) if (existsSync(p)) return p;
  throw new Error(`tiered: tiered.fatbin not found (looked in ${c.join(', ')}); run node bench/tiered/build.mjs`);
}

export class CudaTieredExecutor implements TieredExecutor {
  readonly name: string;
  private readonly row: number;
  private readonly C: number;
  private readonly fns: Record<'gate' | 'down' | 'count' | 'fill' | 'fillf', bigint>;
  private readonly hot: bigint;
  private readonly cold: Array<{ hostPtr: bigint; dev: bigint }>;
  private readonly staging: bigint;
  private readonly x: bigint;
  private readonly act: bigint;
  private readonly y: bigint;
  private readonly dSlots: bigint;
  private readonly dItems: bigint;
  private readonly dPicks: bigint;
  private readonly dCounts: bigint;
  private readonly pinned: { host: Uint8Array; hostPtr: bigint };
  private readonly compute: bigint;
  private readonly copyStream: bigint;
  private readonly ev: { start: bigint; end: bigint; c0: bigint; c1: bigint };
  private readonly ring: bigint[] = [];
  private tickets = 0;
  private stepsRun = 0;
  private readonly maxItems: number;
  private readonly off: { slots: number; items: number; picks: number };

  private constructor(private readonly d: CudaDriver, private readonly x2: CudaExtra, readonly geometry: TieredGeometry, fatbin: string, o: CudaExecutorOptions) {
    const g = geometry;
    const log = o.log ?? (() => {});
    this.name = `cuda (${d.deviceName})`;
    this.row = rowBytes(g);
    // Host bank rows per layer (the kernels' Banks.C): E - H cold rows, or E mirror rows. Slots H .. H + C - 1
    // address it in both modes, so the kernels are the same.
    this.C = hostRowsPerLayer(g);
    const mod = d.loadModule(readFileSync(fatbin), 'tiered.fatbin');
    this.fns = {
      gate: d.getFunction(mod, 'ffn_gate_up'), down: d.getFunction(mod, 'ffn_down'), count: d.getFunction(mod, 'count_picks'),
      fill: d.getFunction(mod, 'fill_bf16'), fillf: d.getFunction(mod, 'fill_f32'),
    };
    this.maxItems = Math.max(MAXT * g.topK, o.check ? g.experts : 0);
    const t0 = Date.now();
    this.hot = d.alloc(g.layers * g.hotPerLayer * this.row, 'hot bank');
    // No staging rows in mirror mode (cuMemAlloc refuses 0 bytes): the kernels never resolve a staging slot then.
    this.staging = g.stagingRows > 0 ? d.alloc(g.stagingRows * this.row, 'staging rows') : 0n;
    log(`hot bank ${(g.layers * g.hotPerLayer * this.row / 2 ** 30).toFixed(1)} GiB + staging ${(g.stagingRows * this.row / 2 ** 30).toFixed(2)} GiB in ${Date.now() - t0} ms`);
    const t1 = Date.now();
    this.cold = [];
    const bank = moveMode(g) === 'mirror' ? 'host mirror' : 'cold bank';
    for (let l = 0; l < g.layers; l++) this.cold.push(x2.hostAllocMapped(this.C * this.row, `${bank} layer ${l}`));
    log(`${bank} ${(g.layers * this.C * this.row / 2 ** 30).toFixed(1)} GiB pinned+mapped host (${this.C} rows/layer) in ${Date.now() - t1} ms`);
    this.x = d.alloc(MAXT * g.hidden * 4, 'x');
    this.act = d.alloc(this.maxItems * MAXT * g.intermediate * 4, 'act');
    this.y = d.alloc(this.maxItems * MAXT * g.hidden * 4, 'y');
    this.off = { slots: 0, items: g.layers * g.experts * 4, picks: g.layers * g.experts * 4 + g.layers * this.maxItems * ITEM_INTS * 4 };
    const pinnedBytes = this.off.picks + MAXT * g.layers * g.topK * 2 + 64;
    this.pinned = d.allocPinned(pinnedBytes, 'step uploads');
    this.dSlots = d.alloc(g.layers * g.experts * 4, 'slot table');
    this.dItems = d.alloc(g.layers * this.maxItems * ITEM_INTS * 4, 'work items');
    this.dPicks = d.alloc(MAXT * g.layers * g.topK * 2, 'picks');
    this.dCounts = d.alloc(g.layers * g.experts * 4, 'counts');
    d.memsetD8(this.dCounts, 0, g.layers * g.experts * 4);
    this.compute = d.streamCreate();
    this.copyStream = d.streamCreate();
    this.ev = { start: d.eventCreate(), end: d.eventCreate(), c0: d.eventCreate(), c1: d.eventCreate() };
    for (let i = 0; i < EVENT_RING; i++) this.ring.push(x2.eventCreateNoTiming());
    // Random bf16 weights (never zeros), each row its own values; x random.
    const t2 = Date.now();
    const rowElems = BigInt(this.row / 2);
    this.fill(this.hot, BigInt(g.layers * g.hotPerLayer) * rowElems, 1n);
    if (g.stagingRows > 0) this.fill(this.staging, BigInt(g.stagingRows) * rowElems, 2n);
    this.cold.forEach((c, l) => this.fill(c.dev, BigInt(this.C) * rowElems, 100n + BigInt(l)));
    d.launch(this.fns.fillf, 'fill_f32', [64, 1, 1], 256, 0, this.compute, [{ u64: this.x }, { u64: BigInt(MAXT * g.hidden) }, { u64: 7n }, { f32: 1 }]);
    d.streamSync(this.compute, 'fill');
    log(`filled banks with random bf16 in ${Date.now() - t2} ms`);
  }

  static async create(g: TieredGeometry, o: CudaExecutorOptions = {}): Promise<CudaTieredExecutor> {
    const d = await loadDriver();
    const x2 = await loadExtra();
    return new CudaTieredExecutor(d, x2, g, findFatbin(o.fatbin), o);
  }

  private fill(ptr: bigint, n: bigint, seed: bigint): void {
    this.d.launch(this.fns.fill, 'fill_bf16', [this.d.smCount * 8, 1, 1], 256, 0, this.compute, [{ u64: ptr }, { u64: n }, { u64: seed }, { f32: 0.05 }]);
  }

  /** Device address of `slot`'s row in layer `l`. */
  slotAddr(l: number, slot: number): bigint {
    const g = this.geometry;
    if (slot < g.hotPerLayer) return this.hot + BigInt((l * g.hotPerLayer + slot) * this.row);
    if (slot < g.hotPerLayer + this.C) return this.cold[l]!.dev + BigInt((slot - g.hotPerLayer) * this.row);
    if (slot - g.hotPerLayer - this.C >= g.stagingRows) throw new Error(`tiered: slot ${slot} of layer ${l} is past the staging rows`);
    return this.staging + BigInt((slot - g.hotPerLayer - this.C) * this.row);
  }

  private banks(l: number): Uint8Array {
    const b = Buffer.alloc(32);
    b.writeBigUInt64LE(this.hot + BigInt(l * this.geometry.hotPerLayer * this.row), 0);
    b.writeBigUInt64LE(this.cold[l]!.dev, 8);
    b.writeBigUInt64LE(this.staging, 16);
    b.writeInt32LE(this.geometry.hotPerLayer, 24);
    b.writeInt32LE(this.C, 28);
    return b;
  }

  private launchLayer(l: number, items: bigint, n: number): void {
    const g = this.geometry;
    const slots = this.dSlots + BigInt(l * g.experts * 4);
    const common: KernelArg[] = [{ bytes: this.banks(l) }, { u64: slots }, { u64: items }];
    this.d.launch(this.fns.gate, 'ffn_gate_up', [g.intermediate / 8, n, 1], 256, MAXT * g.hidden * 4, this.compute,
      [...common, { u64: this.x }, { u64: this.act }, { i32: g.hidden }, { i32: g.intermediate }]);
    this.d.launch(this.fns.down, 'ffn_down', [g.hidden / 8, n, 1], 256, MAXT * g.intermediate * 4, this.compute,
      [...common, { u64: this.act }, { u64: this.y }, { i32: g.hidden }, { i32: g.intermediate }]);
  }

  step(slots: Int32Array, plan: StepPlan, picks: Uint16Array | null): StepTimes {
    const g = this.geometry;
    const d = this.d;
    const h = this.pinned.host;
    if (plan.maxItems > this.maxItems) throw new Error(`tiered: ${plan.maxItems} items per layer, buffers hold ${this.maxItems}`);
    h.set(new Uint8Array(slots.buffer, slots.byteOffset, slots.byteLength), this.off.slots);
    // Items are laid out [layer][plan.maxItems]; the device buffer uses the same stride.
    h.set(new Uint8Array(plan.items.buffer, plan.items.byteOffset, plan.items.byteLength), this.off.items);
    if (picks) h.set(new Uint8Array(picks.buffer, picks.byteOffset, picks.byteLength), this.off.picks);
    d.eventRecord(this.ev.start, this.compute);
    d.htodAsync(this.dSlots, this.pinned.hostPtr + BigInt(this.off.slots), slots.byteLength, this.compute);
    d.htodAsync(this.dItems, this.pinned.hostPtr + BigInt(this.off.items), plan.items.byteLength, this.compute);
    // The picks upload stands in for the router's output, already on the device in the engine.
    if (picks) d.htodAsync(this.dPicks, this.pinned.hostPtr + BigInt(this.off.picks), picks.byteLength, this.compute);
    for (let l = 0; l < g.layers; l++) {
      const n = plan.counts[l]!;
      if (n > 0) this.launchLayer(l, this.dItems + BigInt(l * plan.maxItems * ITEM_INTS * 4), n);
    }
    if (picks) {
      // The counter's own cost is the kernel between c0 and c1. It is enqueued after the expert kernels, so
      // the GPU reaches c0 while still busy with them and never waits there for the host to enqueue the
      // kernel (at the start of a step it did: a first run on a fresh machine timed 20 us of host latency as
      // counter time, against 3.5 us for the kernel itself).
      d.eventRecord(this.ev.c0, this.compute);
      d.launch(this.fns.count, 'count_picks', [Math.ceil(picks.length / 256), 1, 1], 256, 0, this.compute,
        [{ u64: this.dPicks }, { i32: picks.length }, { i32: g.layers }, { i32: g.topK }, { i32: g.experts }, { u64: this.dCounts }]);
      d.eventRecord(this.ev.c1, this.compute);
    }
    d.eventRecord(this.ev.end, this.compute);
    const stepMs = d.eventElapsed(this.ev.start, this.ev.end);
    const countMs = picks ? d.eventElapsed(this.ev.c0, this.ev.c1) : 0;
    this.stepsRun++;
    return { stepMs, countMs };
  }

  copy(copies: readonly RowCopy[]): number {
    // Ordered after every step enqueued so far (the last step's end event): no copy overwrites a row a
    // running step may read (rows.ts explains why the table never points at a row being written).
    if (this.stepsRun > 0) this.x2.streamWaitEvent(this.copyStream, this.ev.end);
    for (const c of copies) this.x2.memcpyAsync(this.slotAddr(c.layer, c.dst), this.slotAddr(c.layer, c.src), this.row, this.copyStream);
    const t = this.tickets++;
    const ev = this.ring[t % EVENT_RING]!;
    this.d.eventRecord(ev, this.copyStream);
    return t;
  }

  done(ticket: number): boolean {
    if (ticket < this.tickets - EVENT_RING) throw new Error(`tiered: ticket ${ticket} is older than the event ring`);
    return this.x2.eventDone(this.ring[ticket % EVENT_RING]!);
  }

  /** Waits for the copy stream (used by checks). */
  drainCopies(): void {
    this.d.streamSync(this.copyStream, 'copies');
  }

  /** y (1 token, x row 0) of each expert in `experts` of layer `l` under `slots`: [experts.length][hidden]. */
  probe(slots: Int32Array, l: number, experts: readonly number[]): Float32Array {
    const g = this.geometry;
    if (experts.length > this.maxItems) throw new Error('tiered: probe needs the check buffers');
    const items = new Int32Array(this.maxItems * ITEM_INTS);
    experts.forEach((e, j) => { items[j * ITEM_INTS] = e; items[j * ITEM_INTS + 1] = 1; items[j * ITEM_INTS + 2] = 0; });
    this.d.htod(this.dSlots, slots);
    this.d.htod(this.dItems, items);
    this.launchLayer(l, this.dItems, experts.length);
    this.d.streamSync(this.compute, 'probe');
    const y = new Float32Array(this.maxItems * MAXT * g.hidden);
    this.d.dtoh(y, this.y);
    const out = new Float32Array(experts.length * g.hidden);
    experts.forEach((_, j) => out.set(y.subarray(j * MAXT * g.hidden, j * MAXT * g.hidden + g.hidden), j * g.hidden));
    return out;
  }

  /** The row bytes at `slot` of layer `l` (read back) and x row 0, for CPU references. */
  readRow(l: number, slot: number): Uint16Array {
    const out = new Uint16Array(this.row / 2);
    this.d.dtoh(out, this.slotAddr(l, slot));
    return out;
  }

  readX(): Float32Array {
    const x = new Float32Array(MAXT * this.geometry.hidden);
    this.d.dtoh(x, this.x);
    return x.subarray(0, this.geometry.hidden);
  }

  close(): void {
    this.d.streamSync(this.compute, 'close');
    this.d.streamSync(this.copyStream, 'close');
    for (const c of this.cold) this.x2.freeHost(c.hostPtr);
    this.d.free(this.hot);
    if (this.staging !== 0n) this.d.free(this.staging);
  }
}
