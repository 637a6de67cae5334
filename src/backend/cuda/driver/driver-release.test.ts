// The driver wrappers' own error paths, on a fake entry-point table (no GPU, no koffi): a call that fails
// after the wrapper already acquired something gives it back (mapped host block, captured graph), and the
// release calls reach the right entry points.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../../../errors.ts';
import { makeDriver, type Fn, type Koffi } from './driver.ts';

function fakeTable(failing: ReadonlySet<string>): { f: Record<string, Fn>; live: Map<bigint, string>; calls: string[] } {
  const live = new Map<bigint, string>();
  const calls: string[] = [];
  let next = 0x1000n;
  const out = (b: unknown, kind: string): number => {
    const h = next;
    next += 0x1000n;
    live.set(h, kind);
    (b as Buffer).writeBigUInt64LE(h, 0);
    return 0;
  };
  const release = (h: unknown, kind: string): number => {
    if (live.get(h as bigint) !== kind) throw new Error(`releasing ${kind} 0x${(h as bigint).toString(16)} that is not live`);
    live.delete(h as bigint);
    return 0;
  };
  const impl: Record<string, Fn> = {
    cuInit: () => 0,
    cuGetErrorName: () => 1,
    cuDeviceGet: (b) => ((b as Buffer).writeInt32LE(0, 0), 0),
    cuDeviceGetName: (b) => ((b as Buffer).write('fake\0'), 0),
    cuDeviceGetAttribute: (b) => ((b as Buffer).writeInt32LE(4, 0), 0),
    cuDevicePrimaryCtxRetain: (b) => ((b as Buffer).writeBigUInt64LE(1n, 0), 0),
    cuCtxSetCurrent: () => 0,
    cuMemHostAlloc: (b) => out(b, 'host'),
    cuMemHostGetDevicePointer: (b) => ((b as Buffer).writeBigUInt64LE(0x9000000n, 0), 0),
    cuMemFreeHost: (h) => release(h, 'host'),
    cuMemAlloc: (b) => out(b, 'device'),
    cuMemFree: (h) => release(h, 'device'),
    cuModuleLoadData: (b) => out(b, 'module'),
    cuModuleUnload: (h) => release(h, 'module'),
    cuStreamCreate: (b) => out(b, 'stream'),
    cuStreamDestroy: (h) => release(h, 'stream'),
    cuEventCreate: (b) => out(b, 'event'),
    cuEventDestroy: (h) => release(h, 'event'),
    cuStreamBeginCapture: () => 0,
    cuStreamEndCapture: (_s, g) => out(g, 'graph'),
    cuGraphInstantiateWithFlags: (e) => out(e, 'exec'),
    cuGraphDestroy: (g) => release(g, 'graph'),
    cuGraphExecDestroy: (e) => release(e, 'exec'),
  };
  const f: Record<string, Fn> = {};
  for (const [name, fn] of Object.entries(impl)) {
    f[name] = (...args) => {
      calls.push(name);
      return failing.has(name) ? 2 : fn(...args); // 2: CUDA_ERROR_OUT_OF_MEMORY
    };
  }
  return { f, live, calls };
}

const koffi: Koffi = {
  load: () => { throw new Error('not used'); },
  address: () => 0n,
  view: (_p, len) => new ArrayBuffer(len),
};

const cudaError = (re: RegExp) => (e: unknown): boolean => e instanceof ResidencyError && e.code === 'CUDA_ERROR' && re.test(e.message);

test('allocMappedHost frees the pinned block when mapping it fails', () => {
  const t = fakeTable(new Set(['cuMemHostGetDevicePointer']));
  const d = makeDriver(koffi, t.f);
  assert.throws(() => d.allocMappedHost(4096, 'cold bank layer 0'), cudaError(/OUT_OF_MEMORY in cuMemHostGetDevicePointer\(cold bank layer 0\)/));
  assert.equal(t.live.size, 0);
  assert.ok(t.calls.includes('cuMemFreeHost'));
});

test('captureGraph destroys the captured graph when instantiation fails, and after it succeeds', () => {
  const failing = fakeTable(new Set(['cuGraphInstantiateWithFlags']));
  const d = makeDriver(koffi, failing.f);
  assert.throws(() => d.captureGraph(0x50n, () => {}, 'decode graph, bucket 1'), cudaError(/cuGraphInstantiateWithFlags/));
  assert.equal(failing.live.size, 0, 'the graph template was destroyed');

  const ok = fakeTable(new Set());
  const d2 = makeDriver(koffi, ok.f);
  const exec = d2.captureGraph(0x50n, () => {}, 'decode graph, bucket 1');
  assert.deepEqual([...ok.live.values()], ['exec'], 'only the instance is left');
  d2.graphDestroy(exec);
  assert.equal(ok.live.size, 0);
});

test('captureGraph: a body that throws ends the capture, destroys its graph and rethrows the body error', () => {
  const t = fakeTable(new Set());
  const d = makeDriver(koffi, t.f);
  const boom = new Error('launch failed in capture');
  assert.throws(() => d.captureGraph(0x50n, () => { throw boom; }, 'g'), (e: unknown) => e === boom);
  assert.ok(t.calls.includes('cuStreamEndCapture'));
  assert.equal(t.live.size, 0);
});

test('every acquire has its release bound: module, stream, event, device and pinned memory', () => {
  const t = fakeTable(new Set());
  const d = makeDriver(koffi, t.f);
  const m = d.loadModule(new Uint8Array(8), 'layer.fatbin');
  const s = d.streamCreate();
  const e = d.eventCreate();
  const p = d.alloc(64, 'x');
  const h = d.allocPinned(64, 'y');
  const mh = d.allocMappedHost(64, 'z');
  assert.equal(t.live.size, 6);
  d.freeHost(mh.hostPtr);
  d.freeHost(h.hostPtr);
  d.free(p);
  d.eventDestroy(e);
  d.streamDestroy(s);
  d.unloadModule(m);
  assert.equal(t.live.size, 0);
});
