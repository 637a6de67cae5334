// Driver calls the tiered benchmark needs beyond src/backend/cuda/driver.ts (owned elsewhere): a generic
// async copy (UVA: host<->device and device<->device through one call), cross-stream event waits, event
// queries, and host allocation with DEVICEMAP|PORTABLE. Same koffi pattern as driver.ts; the context that
// driver.ts made current is used (call loadDriver first).
import { ResidencyError } from '../../src/errors.ts';

type Fn = (...args: unknown[]) => number;
interface Koffi { load(path: string): { func(proto: string): unknown } }

export interface CudaExtra {
  memcpyAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  streamWaitEvent(stream: bigint, ev: bigint): void;
  /** True when the event completed (CUDA_SUCCESS), false while pending (CUDA_ERROR_NOT_READY). */
  eventDone(ev: bigint): boolean;
  eventCreateNoTiming(): bigint;
  /** cuMemHostAlloc(DEVICEMAP | PORTABLE) + its device pointer; no host view (rows are filled on the device). */
  hostAllocMapped(bytes: number, what: string): { hostPtr: bigint; dev: bigint };
  freeHost(hostPtr: bigint): void;
}

const CUDA_ERROR_NOT_READY = 600;
const CU_MEMHOSTALLOC_PORTABLE = 0x01;
const CU_MEMHOSTALLOC_DEVICEMAP = 0x02;
const CU_EVENT_DISABLE_TIMING = 0x2;

export async function loadExtra(libPath = process.env['RESIDENCY_LIBCUDA'] ?? 'libcuda.so.1'): Promise<CudaExtra> {
  const koffi = (await import('koffi')) as unknown as Koffi;
  const lib = koffi.load(libPath);
  const fn = (proto: string) => lib.func(proto) as unknown as Fn;
  const f = {
    memcpyAsync: fn('int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)'),
    waitEvent: fn('int cuStreamWaitEvent(uint64_t stream, uint64_t ev, uint32_t flags)'),
    query: fn('int cuEventQuery(uint64_t ev)'),
    eventCreate: fn('int cuEventCreate(void *ev, uint32_t flags)'),
    hostAlloc: fn('int cuMemHostAlloc(void *pp, size_t bytes, uint32_t flags)'),
    hostDev: fn('int cuMemHostGetDevicePointer_v2(void *dptr, uint64_t p, uint32_t flags)'),
    freeHost: fn('int cuMemFreeHost(uint64_t p)'),
  };
  const check = (rc: number, call: string) => {
    if (rc !== 0) throw new ResidencyError('CUDA_ERROR', `${call} failed with CUresult ${rc}`);
  };
  return {
    memcpyAsync(dst, src, bytes, stream) { check(f.memcpyAsync(dst, src, bytes, stream), `cuMemcpyAsync ${bytes} B`); },
    streamWaitEvent(stream, ev) { check(f.waitEvent(stream, ev, 0), 'cuStreamWaitEvent'); },
    eventDone(ev) {
      const rc = f.query(ev);
      if (rc === 0) return true;
      if (rc === CUDA_ERROR_NOT_READY) return false;
      check(rc, 'cuEventQuery');
      return false;
    },
    eventCreateNoTiming() {
      const b = Buffer.alloc(8);
      check(f.eventCreate(b, CU_EVENT_DISABLE_TIMING), 'cuEventCreate');
      return b.readBigUInt64LE(0);
    },
    hostAllocMapped(bytes, what) {
      const p = Buffer.alloc(8);
      check(f.hostAlloc(p, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE), `cuMemHostAlloc ${bytes} B for ${what}`);
      const hostPtr = p.readBigUInt64LE(0);
      const d = Buffer.alloc(8);
      check(f.hostDev(d, hostPtr, 0), `cuMemHostGetDevicePointer for ${what}`);
      return { hostPtr, dev: d.readBigUInt64LE(0) };
    },
    freeHost(hostPtr) { check(f.freeHost(hostPtr), 'cuMemFreeHost'); },
  };
}
