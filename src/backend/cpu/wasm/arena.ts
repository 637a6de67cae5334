// The SIMD path's memory: one shared WebAssembly.Memory holding the arrays the wasm kernel reads and
// writes (lm head, routers, q/k/v/o projections, the activations around them). Shared so worker threads
// instantiate the same kernel over the same bytes, and because growing a shared memory never detaches
// the views already handed out (a plain memory's grow would). A bump allocator: arrays live as long as
// the backend (scratch regrowth leaks the old, smaller buffers, bounded by the power-of-two growth).
import { ResidencyError } from '../../../errors.ts';
import type { Alloc } from '../alloc.ts';
import type { Bf16Matrix } from '../../../model/quant.ts';
import type { Bf16Memory } from '../../../model/weights.ts';
import { MAX_PAGES } from './module.ts';
import { SIMD_WEIGHT_BYTES } from './simd-option.ts';
import { wasmApi, type WasmMemory } from './api.ts';

const PAGE = 65536;

export class WasmArena implements Alloc, Bf16Memory {
  readonly shared = true;
  readonly memory: WasmMemory;
  /** Next free byte (16-aligned; address 0 is left unused). */
  private top = 16;
  private readonly own = new WeakSet<Float32Array | Int32Array | Uint16Array>();
  /** Freed reusable blocks by byte size, and the block size of each reusable array handed out. */
  private readonly freed = new Map<number, number[]>();
  private readonly blockOf = new WeakMap<Float32Array, number>();

  constructor(initialBytes = PAGE) {
    const pages = Math.max(1, Math.ceil(initialBytes / PAGE));
    if (!wasmApi) throw new ResidencyError('NOT_AVAILABLE', 'cpu simd: this runtime has no WebAssembly');
    this.memory = new wasmApi.Memory({ initial: pages, maximum: MAX_PAGES, shared: true });
  }

  f32(n: number): Float32Array {
    const at = this.take(n * 4); // may grow the memory: read .buffer after
    const a = new Float32Array(this.memory.buffer, at, n);
    this.own.add(a);
    return a;
  }

  i32(n: number): Int32Array {
    const at = this.take(n * 4); // may grow the memory: read .buffer after
    const a = new Int32Array(this.memory.buffer, at, n);
    this.own.add(a);
    return a;
  }

  f64(n: number): Float64Array {
    const at = this.take(n * 8);
    return new Float64Array(this.memory.buffer, at, n);
  }

  /**
   * A zeroed array that `free` may hand back for reuse (KV caches: sequences open and close for the life
   * of a server). Blocks are powers of two in bytes, so a few sizes recycle whatever capacities come.
   */
  f32Reusable(n: number): Float32Array {
    let bytes = 16;
    while (bytes < n * 4) bytes *= 2;
    const list = this.freed.get(bytes);
    const at = list && list.length > 0 ? list.pop()! : this.take(bytes);
    const a = new Float32Array(this.memory.buffer, at, n);
    a.fill(0);
    this.own.add(a);
    this.blockOf.set(a, bytes);
    return a;
  }

  /** Hands an array from f32Reusable back (the caller holds it no more); others are ignored. */
  free(a: Float32Array | Int32Array): void {
    const bytes = a instanceof Float32Array ? this.blockOf.get(a) : undefined;
    if (bytes === undefined) return;
    this.blockOf.delete(a as Float32Array);
    this.own.delete(a);
    let list = this.freed.get(bytes);
    if (!list) this.freed.set(bytes, (list = []));
    list.push(a.byteOffset);
  }

  /** A copy of `a` in the arena. */
  copy(a: Float32Array): Float32Array {
    const c = this.f32(a.length);
    c.set(a);
    return c;
  }

  /**
   * Room for n bf16 values (the loader reads bf16 matrices kept as stored straight here: model/weights.ts Bf16Memory),
   * or undefined past the share of the 4 GiB the kernel addresses that weights may fill (SIMD_WEIGHT_BYTES, as resolveSimd).
   */
  u16(n: number): Uint16Array | undefined {
    if (!Number.isInteger(n) || n < 0) throw new ResidencyError('INTERNAL', `cpu simd: u16(${n}): expected a count >= 0`);
    if (this.top + 2 * n > SIMD_WEIGHT_BYTES) return undefined;
    return this.view16(n);
  }

  /** A copy of a bf16 matrix kept as stored, its bit patterns in the arena (the kernel's linear_tab_bf16 reads them). */
  bf16(m: Bf16Matrix): Bf16Matrix {
    const data = this.view16(m.data.length);
    data.set(m.data);
    return { ...m, data };
  }

  /** n 16-bit values taken from the arena, known to it (holds). */
  private view16(n: number): Uint16Array {
    const at = this.take(2 * n); // first: taking may grow the memory (a new buffer)
    const a = new Uint16Array(this.memory.buffer, at, n);
    this.own.add(a);
    return a;
  }

  /** Whether `a` is an array this arena handed out (the kernel may address it by byteOffset). */
  holds(a: Float32Array | Int32Array | Uint16Array): boolean {
    return this.own.has(a);
  }

  private take(bytes: number): number {
    const at = this.top;
    const end = at + Math.ceil(bytes / 16) * 16;
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      const pages = Math.ceil((end - have) / PAGE);
      if (have / PAGE + pages > MAX_PAGES) {
        throw new ResidencyError('NOT_AVAILABLE', `cpu simd: ${end} bytes of wasm memory needed, at most ${MAX_PAGES * PAGE} possible`);
      }
      // Grow at least by half again: fewer grow calls as scratch regrows.
      this.memory.grow(Math.min(MAX_PAGES - have / PAGE, Math.max(pages, Math.ceil(have / PAGE / 2))));
    }
    this.top = end;
    return at;
  }
}
