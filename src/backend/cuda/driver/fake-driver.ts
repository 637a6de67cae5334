// A CudaDriver with no GPU behind it, for tests of resource ownership: it hands out fake handles, records
// which are live, refuses double frees and uses of freed memory, and can be told to fail the N-th
// acquisition, the N-th call of any kind, or the N-th release.
import { ResidencyError } from '../../../errors.ts';
import type { CudaDriver, KernelArg } from './driver.ts';

export type FakeKind = 'device' | 'host' | 'module' | 'stream' | 'event' | 'graph';

interface Live {
  readonly kind: FakeKind;
  readonly what: string;
  readonly bytes: number;
  /** Device alias of a mapped host block. */
  readonly dev?: bigint;
}

export interface FakeFailures {
  /** Fail the N-th acquisition (alloc, pinned/mapped alloc, module, stream, event, graph), 1-based. */
  acquisition?: number;
  /** Fail the N-th driver call of any kind except releases, 1-based. */
  call?: number;
  /** Fail the N-th release (free, unload, destroy), 1-based; the handle stays live. */
  release?: number;
}

const SPACING = 1n << 32n; // handles far apart, so an offset pointer always falls inside its own block
const DEFAULT_DYNAMIC_SMEM = 48 * 1024;

export class FakeCudaDriver implements CudaDriver {
  readonly deviceName = 'fake device';
  readonly smCount = 4;
  readonly live = new Map<bigint, Live>();
  /** Every acquisition and release in order ('+device logits', '-stream'), for order checks. */
  readonly log: string[] = [];
  /** Every kernel launch (eager, or recorded into a graph being captured) with its grid, in order. */
  /** The size of every asynchronous device-to-host copy, in order. */
  readonly dtohBytes: number[] = [];
  readonly launches: { name: string; grid: [number, number, number]; block: number; args: KernelArg[]; pdl: boolean }[] = [];
  acquisitions = 0;
  calls = 0;
  releases = 0;
  /** What each asynchronous host-to-device copy from pinned memory carried (a snapshot at the call), in order, with its stream and the launches before it. */
  readonly htodCarried: { dst: bigint; bytes: Uint8Array; stream: bigint; afterLaunches: number }[] = [];
  private readonly pinned = new Map<bigint, Uint8Array>();
  /** Every copyAsync, in order (background moves' row copies). */
  readonly copies: { dst: bigint; src: bigint; bytes: number; stream: bigint }[] = [];
  /** Whether recorded events report done (false: every copy is still running). */
  eventsComplete = true;
  /** The error the last injected failure threw (the constructor must rethrow this very object). */
  injected: ResidencyError | null = null;
  private next = SPACING;
  private readonly fnIndex = new Map<string, number>();
  /** Dynamic shared memory a function may launch with (setMaxDynamicSmem), by handle. */
  private readonly maxSmem = new Map<bigint, number>();

  constructor(public fail: FakeFailures = {}) {}

  /** Live handles by kind ({} when nothing leaked). */
  liveByKind(): Partial<Record<FakeKind, number>> {
    const out: Partial<Record<FakeKind, number>> = {};
    for (const l of this.live.values()) out[l.kind] = (out[l.kind] ?? 0) + 1;
    return out;
  }

  alloc(bytes: number, what: string): bigint {
    // Like cuMemAlloc: more than the (fake, 16 GiB) device has free is out of memory, and nothing is taken.
    if (bytes > this.memInfo().free) {
      this.tick('alloc');
      throw new ResidencyError('CUDA_ERROR', `CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc(${bytes} B for ${what})`);
    }
    return this.acquire('device', what, bytes);
  }
  free(ptr: bigint): void {
    this.release(ptr, 'device');
  }
  allocMappedHost(bytes: number, what: string): { host: Uint8Array; dev: bigint; hostPtr: bigint } {
    this.tick('allocMappedHost');
    this.countAcquisition(what);
    const hostPtr = this.handle();
    const dev = this.handle();
    this.live.set(hostPtr, { kind: 'host', what, bytes, dev });
    this.log.push(`+host ${what}`);
    return { host: new Uint8Array(bytes), dev, hostPtr };
  }
  freeHost(hostPtr: bigint): void {
    this.pinned.delete(hostPtr);
    this.release(hostPtr, 'host');
  }
  allocPinned(bytes: number, what: string): { host: Uint8Array; hostPtr: bigint } {
    const out = { host: new Uint8Array(bytes), hostPtr: this.acquire('host', what, bytes) };
    this.pinned.set(out.hostPtr, out.host);
    return out;
  }
  htod(dst: bigint, src: ArrayBufferView): void {
    this.tick('htod');
    this.use(dst, src.byteLength);
  }
  dtoh(dst: ArrayBufferView, src: bigint): void {
    this.tick('dtoh');
    this.use(src, dst.byteLength);
  }
  dtod(dst: bigint, src: bigint, bytes: number): void {
    this.tick('dtod');
    this.use(dst, bytes);
    this.use(src, bytes);
  }
  htodAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.tick('htodAsync');
    const host = this.pinned.get(src);
    if (host) this.htodCarried.push({ dst, bytes: host.slice(0, bytes), stream, afterLaunches: this.launches.length });
    this.use(dst, bytes);
    this.use(src, bytes);
    this.use(stream, 0);
  }
  dtohAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.tick('dtohAsync');
    this.dtohBytes.push(bytes);
    this.use(dst, bytes);
    this.use(src, bytes);
    this.use(stream, 0);
  }
  copyAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.tick('copyAsync');
    this.copies.push({ dst, src, bytes, stream });
    this.use(dst, bytes);
    this.use(src, bytes);
    this.use(stream, 0);
  }
  memsetD8(dst: bigint, _value: number, bytes: number): void {
    this.tick('memsetD8');
    this.use(dst, bytes);
  }
  loadModule(_image: Uint8Array, what: string): bigint {
    return this.acquire('module', what, 1 << 20);
  }
  unloadModule(module: bigint): void {
    this.release(module, 'module');
  }
  getFunction(module: bigint, name: string): bigint {
    this.tick('getFunction');
    this.use(module, 0);
    // A handle of its own for each name (inside the module's block), so attributes are kept per function.
    let i = this.fnIndex.get(name);
    if (i === undefined) this.fnIndex.set(name, (i = this.fnIndex.size));
    return module + 16n * BigInt(i + 1);
  }
  setMaxDynamicSmem(fn: bigint, bytes: number, _name: string): void {
    this.tick('setMaxDynamicSmem');
    this.use(fn, 0);
    this.maxSmem.set(fn, bytes);
  }
  launch(fn: bigint, name: string, grid: [number, number, number], block: number, smem: number, stream: bigint, args: KernelArg[], pdl?: boolean): void {
    this.tick('launch');
    // Like cuLaunchKernel: dynamic shared memory past 48 KiB needs the function's attribute raised first.
    const limit = this.maxSmem.get(fn) ?? DEFAULT_DYNAMIC_SMEM;
    if (smem > limit) throw new ResidencyError('CUDA_ERROR', `CUDA_ERROR_INVALID_VALUE in cuLaunchKernel(${name} smem ${smem} > ${limit} B: cuFuncSetAttribute not raised)`);
    this.launches.push({ name, grid: [...grid], block, args, pdl: pdl === true });
    this.use(fn, 0);
    this.use(stream, 0);
  }
  streamCreate(): bigint {
    return this.acquire('stream', 'stream', 0);
  }
  streamDestroy(stream: bigint): void {
    this.release(stream, 'stream');
  }
  streamSync(stream: bigint, _what: string): void {
    this.tick('streamSync');
    if (stream !== 0n) this.use(stream, 0);
    this.log.push('sync');
  }
  captureGraph(stream: bigint, body: () => void, what: string): bigint {
    this.use(stream, 0);
    body();
    return this.acquire('graph', what, 0);
  }
  graphLaunch(exec: bigint, stream: bigint): void {
    this.tick('graphLaunch');
    this.use(exec, 0);
    this.use(stream, 0);
  }
  graphDestroy(exec: bigint): void {
    this.release(exec, 'graph');
  }
  eventCreate(): bigint {
    return this.acquire('event', 'event', 0);
  }
  eventDestroy(ev: bigint): void {
    this.release(ev, 'event');
  }
  eventRecord(ev: bigint, stream: bigint): void {
    this.tick('eventRecord');
    this.use(ev, 0);
    this.use(stream, 0);
  }
  eventSync(ev: bigint): void {
    this.tick('eventSync');
    this.use(ev, 0);
  }
  eventDone(ev: bigint): boolean {
    this.tick('eventDone');
    this.use(ev, 0);
    return this.eventsComplete;
  }
  streamWaitEvent(stream: bigint, ev: bigint): void {
    this.tick('streamWaitEvent');
    this.use(stream, 0);
    this.use(ev, 0);
  }
  eventElapsed(start: bigint, end: bigint): number {
    this.tick('eventElapsed');
    this.use(start, 0);
    this.use(end, 0);
    return 0;
  }
  memInfo(): { free: number; total: number } {
    const used = [...this.live.values()].filter((l) => l.kind === 'device').reduce((a, l) => a + l.bytes, 0);
    return { free: 2 ** 34 - used, total: 2 ** 34 };
  }

  private handle(): bigint {
    const h = this.next;
    this.next += SPACING;
    return h;
  }

  private tick(call: string): void {
    if (++this.calls === this.fail.call) this.inject(`call ${this.calls} (${call})`);
  }

  private countAcquisition(what: string): void {
    if (++this.acquisitions === this.fail.acquisition) this.inject(`acquisition ${this.acquisitions} (${what})`);
  }

  private inject(what: string): never {
    this.injected = new ResidencyError('CUDA_ERROR', `CUDA_ERROR_OUT_OF_MEMORY (injected at ${what})`);
    throw this.injected;
  }

  private acquire(kind: FakeKind, what: string, bytes: number): bigint {
    this.tick(`acquire ${kind}`);
    this.countAcquisition(what);
    const h = this.handle();
    this.live.set(h, { kind, what, bytes });
    this.log.push(`+${kind} ${what}`);
    return h;
  }

  private release(h: bigint, kind: FakeKind): void {
    const l = this.live.get(h);
    // Checked before the injected failure: a double free is a bug however the test is set up.
    if (!l || l.kind !== kind) throw new Error(`fake driver: releasing ${kind} 0x${h.toString(16)} that is not live (double free?)`);
    if (++this.releases === this.fail.release) throw new ResidencyError('CUDA_ERROR', `CUDA_ERROR_INVALID_HANDLE (injected at release ${this.releases}, ${l.what})`);
    this.live.delete(h);
    this.log.push(`-${kind} ${l.what}`);
  }

  /** A pointer must fall inside a live block (or a mapped block's device alias). */
  private use(p: bigint, bytes: number): void {
    for (const [h, l] of this.live) {
      const inside = (base: bigint): boolean => p >= base && p + BigInt(bytes) <= base + BigInt(Math.max(l.bytes, 1));
      if (inside(h) || (l.dev !== undefined && inside(l.dev))) return;
    }
    throw new Error(`fake driver: 0x${p.toString(16)} (${bytes} B) is not inside a live block (use after free?)`);
  }
}
