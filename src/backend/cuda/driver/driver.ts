// The CUDA driver API through koffi (no native addon): the calls this backend uses, each checked, with
// handles and device pointers as bigint. Loaded lazily: a machine without koffi or libcuda gets a clear
// NOT_AVAILABLE error and the CPU backend keeps working.
import { ResidencyError } from '../../../errors.ts';
import { checkResult, formatBytes } from './errors.ts';

export type Fn = (...args: unknown[]) => number;
/** The part of koffi this module uses (its ESM namespace also exports these names). */
export interface Koffi {
  load(path: string): { func(proto: string): unknown };
  address(value: unknown): bigint;
  view(ptr: unknown, len: number): ArrayBuffer;
}

/** One kernel argument as cuLaunchKernel wants it: a value the params array points at. */
export type KernelArg = { u64: bigint } | { i32: number } | { f32: number } | { bytes: Uint8Array };

export interface CudaDriver {
  readonly deviceName: string;
  readonly smCount: number;
  alloc(bytes: number, what: string): bigint;
  free(ptr: bigint): void;
  /** Pinned host memory mapped into the device address space (the cold bank): host view + device pointer. */
  allocMappedHost(bytes: number, what: string): { host: Uint8Array; dev: bigint; hostPtr: bigint };
  freeHost(hostPtr: bigint): void;
  /** Pinned host memory for fast async copies. */
  allocPinned(bytes: number, what: string): { host: Uint8Array; hostPtr: bigint };
  htod(dst: bigint, src: ArrayBufferView): void;
  dtoh(dst: ArrayBufferView, src: bigint): void;
  dtod(dst: bigint, src: bigint, bytes: number): void;
  htodAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  dtohAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  /** A copy between two device-addressable ranges (device memory or mapped host memory), on `stream`. */
  copyAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  memsetD8(dst: bigint, value: number, bytes: number): void;
  loadModule(image: Uint8Array, what: string): bigint;
  unloadModule(module: bigint): void;
  getFunction(module: bigint, name: string): bigint;
  setMaxDynamicSmem(fn: bigint, bytes: number, name: string): void;
  /**
   * cuLaunchKernel; with `pdl`, cuLaunchKernelEx with programmatic stream serialization: the kernel may be
   * launched while the one before it on the stream finishes, and waits for it in griddepcontrol.wait (every op
   * path kernel does so at entry), so launch latency overlaps the previous kernel's tail, in graphs too.
   */
  launch(fn: bigint, name: string, grid: [number, number, number], block: number, smem: number, stream: bigint, args: KernelArg[], pdl?: boolean): void;
  streamCreate(): bigint;
  /** Destroys a stream (work already queued on it still completes). */
  streamDestroy(stream: bigint): void;
  streamSync(stream: bigint, what: string): void;
  /** Capture the launches `body` makes on `stream` into an instantiated graph. */
  captureGraph(stream: bigint, body: () => void, what: string): bigint;
  graphLaunch(exec: bigint, stream: bigint): void;
  /** Destroys an instantiated graph (cuGraphExecDestroy), as returned by captureGraph. */
  graphDestroy(exec: bigint): void;
  eventCreate(): bigint;
  eventDestroy(ev: bigint): void;
  eventRecord(ev: bigint, stream: bigint): void;
  /** Waits until the work recorded before `ev` has completed. */
  eventSync(ev: bigint): void;
  /** Whether everything before the event's last record has completed (cuEventQuery; never blocks). */
  eventDone(ev: bigint): boolean;
  /** Work queued on `stream` after this waits for the event's last record (cuStreamWaitEvent). */
  streamWaitEvent(stream: bigint, ev: bigint): void;
  /** Milliseconds between two recorded events (after the second completed). */
  eventElapsed(start: bigint, end: bigint): number;
  /** Free and total device memory (cuMemGetInfo): the GPU tests check that dispose() gives it back. */
  memInfo(): { free: number; total: number };
}

const CU_MEMHOSTALLOC_DEVICEMAP = 0x02;
const CUDA_ERROR_NOT_READY = 600;
const CU_STREAM_NON_BLOCKING = 0x1;
const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

const PROTOTYPES: Record<string, string> = {
  cuInit: 'int cuInit(uint32_t flags)',
  cuGetErrorName: 'int cuGetErrorName(int err, _Out_ const char **name)',
  cuDeviceGet: 'int cuDeviceGet(void *dev, int ordinal)',
  cuDeviceGetName: 'int cuDeviceGetName(void *name, int len, int dev)',
  cuDeviceGetAttribute: 'int cuDeviceGetAttribute(void *value, int attrib, int dev)',
  cuDevicePrimaryCtxRetain: 'int cuDevicePrimaryCtxRetain(void *ctx, int dev)',
  cuCtxSetCurrent: 'int cuCtxSetCurrent(uint64_t ctx)',
  cuMemGetInfo: 'int cuMemGetInfo_v2(void *free, void *total)',
  cuMemAlloc: 'int cuMemAlloc_v2(void *dptr, size_t bytes)',
  cuMemFree: 'int cuMemFree_v2(uint64_t dptr)',
  cuMemHostAlloc: 'int cuMemHostAlloc(void *pp, size_t bytes, uint32_t flags)',
  cuMemHostGetDevicePointer: 'int cuMemHostGetDevicePointer_v2(void *dptr, uint64_t p, uint32_t flags)',
  cuMemFreeHost: 'int cuMemFreeHost(uint64_t p)',
  cuMemcpyHtoD: 'int cuMemcpyHtoD_v2(uint64_t dst, void *src, size_t bytes)',
  cuMemcpyDtoH: 'int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes)',
  cuMemcpyDtoD: 'int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes)',
  cuMemcpyHtoDAsync: 'int cuMemcpyHtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuMemcpyDtoHAsync: 'int cuMemcpyDtoHAsync_v2(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuMemcpyAsync: 'int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuStreamWaitEvent: 'int cuStreamWaitEvent(uint64_t stream, uint64_t ev, uint32_t flags)',
  cuEventQuery: 'int cuEventQuery(uint64_t ev)',
  cuMemsetD8: 'int cuMemsetD8_v2(uint64_t dst, uint8_t value, size_t n)',
  cuModuleLoadData: 'int cuModuleLoadData(void *module, void *image)',
  cuModuleUnload: 'int cuModuleUnload(uint64_t module)',
  cuModuleGetFunction: 'int cuModuleGetFunction(void *fn, uint64_t module, const char *name)',
  cuFuncSetAttribute: 'int cuFuncSetAttribute(uint64_t fn, int attrib, int value)',
  cuLaunchKernelEx: 'int cuLaunchKernelEx(void *config, uint64_t f, void *params, uint64_t extra)',
  cuLaunchKernel:
    'int cuLaunchKernel(uint64_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t smem, uint64_t stream, void *params, uint64_t extra)',
  cuStreamCreate: 'int cuStreamCreate(void *stream, uint32_t flags)',
  cuStreamSynchronize: 'int cuStreamSynchronize(uint64_t stream)',
  cuStreamDestroy: 'int cuStreamDestroy_v2(uint64_t stream)',
  cuStreamBeginCapture: 'int cuStreamBeginCapture_v2(uint64_t stream, int mode)',
  cuStreamEndCapture: 'int cuStreamEndCapture(uint64_t stream, void *graph)',
  cuGraphInstantiateWithFlags: 'int cuGraphInstantiateWithFlags(void *exec, uint64_t graph, uint64_t flags)',
  cuGraphDestroy: 'int cuGraphDestroy(uint64_t graph)',
  cuGraphExecDestroy: 'int cuGraphExecDestroy(uint64_t exec)',
  cuGraphLaunch: 'int cuGraphLaunch(uint64_t exec, uint64_t stream)',
  cuEventCreate: 'int cuEventCreate(void *ev, uint32_t flags)',
  cuEventRecord: 'int cuEventRecord(uint64_t ev, uint64_t stream)',
  cuEventDestroy: 'int cuEventDestroy_v2(uint64_t ev)',
  cuEventSynchronize: 'int cuEventSynchronize(uint64_t ev)',
  cuEventElapsedTime: 'int cuEventElapsedTime(void *ms, uint64_t start, uint64_t end)',
};

let cached: CudaDriver | null = null;

/** Loads koffi and libcuda.so.1 once, initializes device 0 and makes its primary context current. */
export async function loadDriver(libPath = process.env['RESIDENCY_LIBCUDA'] ?? 'libcuda.so.1'): Promise<CudaDriver> {
  if (cached) return cached;
  let koffi: Koffi;
  try {
    koffi = (await import('koffi')) as unknown as Koffi;
  } catch (e) {
    throw new ResidencyError('NOT_AVAILABLE', `cuda backend: the koffi package is not installed (${(e as Error).message}); use --backend cpu`);
  }
  let lib: ReturnType<typeof koffi.load>;
  try {
    lib = koffi.load(libPath);
  } catch (e) {
    throw new ResidencyError('NOT_AVAILABLE', `cuda backend: cannot load ${libPath} (no NVIDIA driver on this machine?): ${(e as Error).message}; use --backend cpu`);
  }
  const f: Record<string, Fn> = {};
  for (const [key, proto] of Object.entries(PROTOTYPES)) f[key] = lib.func(proto) as unknown as Fn;
  cached = makeDriver(koffi, f);
  return cached;
}

/**
 * Binds the CudaDriver over a table of entry points named as in PROTOTYPES: koffi's functions in
 * production; exported so a test can drive the wrappers' own error paths with a fake table.
 */
export function makeDriver(koffi: Koffi, f: Record<string, Fn>): CudaDriver {
  const driverName = (rc: number): string | null => {
    const out: (string | null)[] = [null];
    return f['cuGetErrorName']!(rc, out) === 0 ? out[0] ?? null : null;
  };
  const check = (rc: number, call: string, detail = ''): void => checkResult(rc, call, detail, driverName);
  const out8 = (): Buffer => Buffer.alloc(8);
  const call = (name: string, detail: string, ...args: unknown[]): void => check(f[name]!(...args), name, detail);

  const init = f['cuInit']!(0);
  if (init !== 0) {
    // No device / no driver behind the stub: not a bug in the program, so NOT_AVAILABLE.
    throw new ResidencyError('NOT_AVAILABLE', `cuda backend: cuInit failed with rc ${init} (no usable GPU); use --backend cpu`);
  }
  const devBuf = out8();
  call('cuDeviceGet', '0', devBuf, 0);
  const dev = devBuf.readInt32LE(0);
  const nameBuf = Buffer.alloc(256);
  call('cuDeviceGetName', 'device 0', nameBuf, 256, dev);
  const deviceName = nameBuf.toString('latin1').replace(/\0.*$/s, '');
  const attr = out8();
  call('cuDeviceGetAttribute', 'MULTIPROCESSOR_COUNT', attr, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  const smCount = attr.readInt32LE(0);
  const ctx = out8();
  call('cuDevicePrimaryCtxRetain', 'device 0', ctx, dev);
  call('cuCtxSetCurrent', 'primary context', ctx.readBigUInt64LE(0));

  return {
    deviceName,
    smCount,
    alloc(bytes, what) {
      const p = out8();
      call('cuMemAlloc', `${formatBytes(bytes)} for ${what}`, p, Math.max(bytes, 1));
      return p.readBigUInt64LE(0);
    },
    free(ptr) {
      call('cuMemFree', '', ptr);
    },
    allocMappedHost(bytes, what) {
      const p = out8();
      call('cuMemHostAlloc', `${formatBytes(bytes)} mapped for ${what}`, p, Math.max(bytes, 1), CU_MEMHOSTALLOC_DEVICEMAP);
      const hostPtr = p.readBigUInt64LE(0);
      // All or nothing: the pinned block is freed again if mapping or viewing it fails.
      try {
        const d = out8();
        call('cuMemHostGetDevicePointer', what, d, hostPtr, 0);
        return { host: hostView(koffi, hostPtr, bytes), dev: d.readBigUInt64LE(0), hostPtr };
      } catch (e) {
        f['cuMemFreeHost']!(hostPtr);
        throw e;
      }
    },
    allocPinned(bytes, what) {
      const p = out8();
      call('cuMemHostAlloc', `${formatBytes(bytes)} pinned for ${what}`, p, Math.max(bytes, 1), 0);
      const hostPtr = p.readBigUInt64LE(0);
      try {
        return { host: hostView(koffi, hostPtr, bytes), hostPtr };
      } catch (e) {
        f['cuMemFreeHost']!(hostPtr);
        throw e;
      }
    },
    freeHost(hostPtr) {
      call('cuMemFreeHost', '', hostPtr);
    },
    htod(dst, src) {
      if (src.byteLength > 0) call('cuMemcpyHtoD', formatBytes(src.byteLength), dst, src, src.byteLength);
    },
    dtoh(dst, src) {
      if (dst.byteLength > 0) call('cuMemcpyDtoH', formatBytes(dst.byteLength), dst, src, dst.byteLength);
    },
    dtod(dst, src, bytes) {
      if (bytes > 0) call('cuMemcpyDtoD', formatBytes(bytes), dst, src, bytes);
    },
    htodAsync(dst, src, bytes, stream) {
      call('cuMemcpyHtoDAsync', formatBytes(bytes), dst, src, bytes, stream);
    },
    dtohAsync(dst, src, bytes, stream) {
      call('cuMemcpyDtoHAsync', formatBytes(bytes), dst, src, bytes, stream);
    },
    copyAsync(dst, src, bytes, stream) {
      call('cuMemcpyAsync', formatBytes(bytes), dst, src, bytes, stream);
    },
    memsetD8(dst, value, bytes) {
      call('cuMemsetD8', formatBytes(bytes), dst, value, bytes);
    },
    loadModule(image, what) {
      const m = out8();
      call('cuModuleLoadData', what, m, image);
      return m.readBigUInt64LE(0);
    },
    unloadModule(module) {
      call('cuModuleUnload', '', module);
    },
    getFunction(module, name) {
      const fn = out8();
      call('cuModuleGetFunction', name, fn, module, name);
      return fn.readBigUInt64LE(0);
    },
    setMaxDynamicSmem(fn, bytes, name) {
      call('cuFuncSetAttribute', `${name}: dynamic shared memory ${formatBytes(bytes)}`, fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
    },
    launch(fn, name, grid, block, smem, stream, args, pdl = false) {
      const params = packArgs(koffi, args);
      const what = `${name} grid ${grid.join('x')} block ${block} smem ${smem}`;
      if (!pdl) {
        call('cuLaunchKernel', what, fn, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, params.pointers, 0n);
        return;
      }
      // CUlaunchAttribute {id u32, pad, value[64]}: PROGRAMMATIC_STREAM_SERIALIZATION (6) = 1.
      // One buffer for the config and the attribute it points at (both stay alive for the call).
      const both = Buffer.alloc(56 + 72);
      const cfg = both.subarray(0, 56);
      const attr = both.subarray(56);
      attr.writeUInt32LE(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 0);
      attr.writeInt32LE(1, 8);
      // CUlaunchConfig {grid xyz, block xyz, smem (u32 x 7), pad, stream u64, attrs ptr, numAttrs u32}.
      [grid[0], grid[1], grid[2], block, 1, 1, smem].forEach((v, i) => cfg.writeUInt32LE(v, 4 * i));
      cfg.writeBigUInt64LE(stream, 32);
      cfg.writeBigUInt64LE(koffi.address(attr), 40);
      cfg.writeUInt32LE(1, 48);
      call('cuLaunchKernelEx', what, cfg, fn, params.pointers, 0n);
    },
    streamCreate() {
      const s = out8();
      call('cuStreamCreate', '', s, CU_STREAM_NON_BLOCKING);
      return s.readBigUInt64LE(0);
    },
    streamDestroy(stream) {
      call('cuStreamDestroy', '', stream);
    },
    streamSync(stream, what) {
      call('cuStreamSynchronize', what, stream);
    },
    captureGraph(stream, body, what) {
      call('cuStreamBeginCapture', what, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      let failure: unknown = null;
      try {
        body();
      } catch (e) {
        failure = e;
      }
      const g = out8();
      const rc = f['cuStreamEndCapture']!(stream, g);
      const graph = rc === 0 ? g.readBigUInt64LE(0) : 0n;
      // The graph is only the template of its instance: destroyed on every path, also when the body or the
      // instantiation failed (it leaked there before).
      let exec: bigint;
      try {
        if (failure) throw failure;
        check(rc, 'cuStreamEndCapture', what);
        const e = out8();
        call('cuGraphInstantiateWithFlags', what, e, graph, 0n);
        exec = e.readBigUInt64LE(0);
      } catch (e) {
        if (graph !== 0n) f['cuGraphDestroy']!(graph);
        throw e;
      }
      const drc = f['cuGraphDestroy']!(graph);
      if (drc !== 0) f['cuGraphExecDestroy']!(exec);
      check(drc, 'cuGraphDestroy', what);
      return exec;
    },
    graphLaunch(exec, stream) {
      call('cuGraphLaunch', '', exec, stream);
    },
    graphDestroy(exec) {
      call('cuGraphExecDestroy', '', exec);
    },
    eventCreate() {
      const e = out8();
      call('cuEventCreate', '', e, 0);
      return e.readBigUInt64LE(0);
    },
    eventDestroy(ev) {
      call('cuEventDestroy', '', ev);
    },
    eventRecord(ev, stream) {
      call('cuEventRecord', '', ev, stream);
    },
    eventSync(ev) {
      call('cuEventSynchronize', '', ev);
    },
    eventDone(ev) {
      const rc = f['cuEventQuery']!(ev);
      if (rc === CUDA_ERROR_NOT_READY) return false;
      check(rc, 'cuEventQuery');
      return true;
    },
    streamWaitEvent(stream, ev) {
      call('cuStreamWaitEvent', '', stream, ev, 0);
    },
    eventElapsed(start, end) {
      call('cuEventSynchronize', '', end);
      const ms = Buffer.alloc(4);
      call('cuEventElapsedTime', '', ms, start, end);
      return ms.readFloatLE(0);
    },
    memInfo() {
      const a = out8();
      const b = out8();
      call('cuMemGetInfo', '', a, b);
      return { free: Number(a.readBigUInt64LE(0)), total: Number(b.readBigUInt64LE(0)) };
    },
  };
}

function hostView(koffi: Koffi, ptr: bigint, bytes: number): Uint8Array {
  // koffi 3 takes a raw address (bigint) for a view over unmanaged memory.
  return new Uint8Array(koffi.view(ptr, bytes));
}

/**
 * cuLaunchKernel's kernelParams: an array of pointers, one per argument, each at the argument's bytes.
 * The values buffer stays referenced by the returned object until the call returns (the driver copies
 * the values at launch, also under stream capture).
 */
export function packArgs(koffi: { address(v: unknown): bigint }, args: KernelArg[]): { pointers: Buffer; values: Buffer } {
  let size = 0;
  const offsets: number[] = [];
  for (const a of args) {
    const n = 'bytes' in a ? a.bytes.byteLength : 'u64' in a ? 8 : 4;
    size = align(size, n >= 8 ? 8 : 4);
    offsets.push(size);
    size += n;
  }
  // One allocation holds the pointer array and the values it points at: passing the pointers to the driver
  // keeps the values alive for the call. (Two buffers let the collector free the values while the call ran,
  // since nothing used them after their address was taken: launches then read garbage arguments.)
  const nptr = 8 * Math.max(args.length, 1);
  const all = Buffer.alloc(nptr + Math.max(size, 8));
  const pointers = all.subarray(0, nptr);
  const values = all.subarray(nptr);
  args.forEach((a, i) => {
    const o = offsets[i]!;
    if ('u64' in a) values.writeBigUInt64LE(a.u64, o);
    else if ('i32' in a) values.writeInt32LE(a.i32, o);
    else if ('f32' in a) values.writeFloatLE(a.f32, o);
    else values.set(a.bytes, o);
  });
  const base = koffi.address(values);
  offsets.forEach((o, i) => pointers.writeBigUInt64LE(base + BigInt(o), 8 * i));
  return { pointers, values };
}

function align(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}
