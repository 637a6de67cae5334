// Where the op tests run a kernel: the GPU (the device-run tests' driver and kernels), or with OPS_DRY=1 the fake
// driver (kernels are no-ops there: every launch, argument encoding and read-back runs, nothing is compared). A
// case's buffers are freed together; outputs start poisoned (0xFF bytes: NaN as float32, -1 as int32), so an
// output a kernel leaves unwritten fails, and a poisoned guard past an output catches a write beyond it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CudaDriver } from '../../../src/backend/cuda/driver/driver.ts';
import { FakeCudaDriver } from '../../../src/backend/cuda/driver/fake-driver.ts';
import { KERNEL_GROUPS, loadKernelModules, type KernelName } from '../../../src/backend/cuda/driver/kernels.ts';
import { ResourceScope } from '../../../src/backend/cuda/driver/resource-scope.ts';
import type { Launch } from '../../../src/backend/cuda/step/launches.ts';
import { raiseSharedMemoryLimits } from '../../../src/backend/cuda/step/step-kernels.ts';
import type { RouteMode } from '../../../src/backend/cuda/step/kernel-args.ts';
import type { ModelSpec } from '../../../src/model/spec.ts';
import { getGpu } from '../harness.ts';

export const DRY = process.env['OPS_DRY'] === '1';

/** Bytes of the poisoned guard after an output. */
export const GUARD = 256;

export class OpDevice {
  /** Releases of the case's buffers, and of those kept for a group of cases (weights several cases read). */
  private held: (() => void)[] = [];
  private kept: (() => void)[] = [];

  private constructor(readonly d: CudaDriver, readonly fns: ReadonlyMap<KernelName, bigint>, readonly stream: bigint) {}

  static async open(): Promise<OpDevice> {
    if (!DRY) {
      const g = await getGpu();
      return new OpDevice(g.d, g.fns, g.stream);
    }
    // The fake driver ignores a fatbin's bytes, but the loader reads one file a kernel group.
    const dir = mkdtempSync(join(tmpdir(), 'ops-dry-'));
    try {
      for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(dir, `${group}.fatbin`), 'fake');
      const d = new FakeCudaDriver();
      const { fns } = loadKernelModules(d, new ResourceScope('op test kernels'), dir);
      return new OpDevice(d, fns, d.streamCreate());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /** The streaming multiprocessors (what the launch helpers size grids by). */
  get smCount(): number {
    return this.d.smCount;
  }

  /** Raises the dynamic shared memory limits as the backend does for a model (gemv rows, routing, the norm's row). */
  raise(spec: ModelSpec, mode: RouteMode): void {
    raiseSharedMemoryLimits(this.d, this.fns, spec, mode);
  }

  alloc(bytes: number, what: string): bigint {
    const p = this.d.alloc(Math.max(bytes, 16), what);
    this.held.push(() => this.d.free(p));
    return p;
  }

  upload(src: ArrayBufferView, what: string): bigint {
    const p = this.alloc(src.byteLength, what);
    this.d.htod(p, src);
    return p;
  }

  /** `bytes` of 0xFF, then GUARD more. */
  poisoned(bytes: number, what: string): bigint {
    const p = this.alloc(bytes + GUARD, what);
    this.d.memsetD8(p, 0xff, bytes + GUARD);
    return p;
  }

  /** `src`, then a poisoned guard (an input the kernel also writes: a KV cache, a row updated in place). */
  guarded(src: ArrayBufferView, what: string): bigint {
    const p = this.poisoned(src.byteLength, what);
    this.d.htod(p, src);
    return p;
  }

  /** Host memory the device reads in place (a cold bank, mapped keys). */
  mapped(bytes: number, what: string): { host: Uint8Array; dev: bigint } {
    const m = this.d.allocMappedHost(bytes, what);
    this.held.push(() => this.d.freeHost(m.hostPtr));
    return m;
  }

  /** Something to release with the case's buffers (banks). */
  hold(release: () => void): void {
    this.held.push(release);
  }

  /** One launch, after every copy and memset before it has landed; returns once it has run. */
  run(l: Launch): void {
    const fn = this.fns.get(l.name);
    if (fn === undefined) throw new Error(`kernel ${l.name} is not loaded`);
    this.d.streamSync(0n, 'op test inputs');
    this.d.launch(fn, l.name, l.grid, l.block, l.smem, this.stream, l.args, false);
    this.d.streamSync(this.stream, l.name);
  }

  /** `bytes` bytes at `ptr` (and the guard after them when `guard`). */
  read(ptr: bigint, bytes: number, guard = false): Uint8Array {
    const out = new Uint8Array(bytes + (guard ? GUARD : 0));
    this.d.dtoh(out, ptr);
    return out;
  }

  readF32(ptr: bigint, n: number): Float32Array {
    return new Float32Array(this.read(ptr, 4 * n).buffer);
  }

  readI32(ptr: bigint, n: number): Int32Array {
    return new Int32Array(this.read(ptr, 4 * n).buffer);
  }

  /** Whether the GUARD bytes after `bytes` at `ptr` are still poison (nothing written past the output). */
  guardIntact(ptr: bigint, bytes: number): boolean {
    return DRY || this.read(ptr + BigInt(bytes), GUARD).every((b) => b === 0xff);
  }

  /** What `make` allocates is kept past release(), until releaseKept(). */
  keep<T>(make: () => T): T {
    const held = this.held;
    this.held = this.kept;
    try {
      return make();
    } finally {
      this.held = held;
    }
  }

  /** Frees the case's buffers, last first. */
  release(): void {
    this.d.streamSync(this.stream, 'op test release');
    while (this.held.length > 0) this.held.pop()!();
  }

  /** Frees what keep() kept (and the case's buffers). */
  releaseKept(): void {
    this.release();
    while (this.kept.length > 0) this.kept.pop()!();
  }
}
