// Where the CPU backend's arrays live: ordinary memory for one thread, SharedArrayBuffer when worker
// threads compute part of each op on the same weights and activations.

export interface Alloc {
  readonly shared: boolean;
  f32(n: number): Float32Array;
  i32(n: number): Int32Array;
  /** Takes back an array this allocator handed out (where it recycles memory: the wasm arena). */
  free?(a: Float32Array | Int32Array): void;
}

export const heapAlloc: Alloc = {
  shared: false,
  f32: (n) => new Float32Array(n),
  i32: (n) => new Int32Array(n),
};

export const sharedAlloc: Alloc = {
  shared: true,
  f32: (n) => new Float32Array(new SharedArrayBuffer(n * 4)),
  i32: (n) => new Int32Array(new SharedArrayBuffer(n * 4)),
};

/** `a` itself when it already lives in shared memory, else a shared copy. */
export function sharedCopy(a: Float32Array): Float32Array {
  if (a.buffer instanceof SharedArrayBuffer) return a;
  const c = sharedAlloc.f32(a.length);
  c.set(a);
  return c;
}
