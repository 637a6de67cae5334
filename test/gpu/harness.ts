// Shared helpers of the device-run tests: the driver, the kernels, random bf16 data, normalized error.
import { loadDriver, type CudaDriver } from '../../src/backend/cuda/driver/driver.ts';
import { loadKernels, type KernelName } from '../../src/backend/cuda/driver/kernels.ts';
import { mulberry32 } from '../../src/backend/cpu/synthetic.ts';
import { TINY_MOE, TINY_MOE_MODEL } from '../../fixtures/fixture-paths.ts';

export interface Gpu {
  d: CudaDriver;
  fns: Map<KernelName, bigint>;
  stream: bigint;
}

let gpu: Gpu | null = null;
export async function getGpu(): Promise<Gpu> {
  if (!gpu) {
    const d = await loadDriver();
    gpu = { d, fns: loadKernels(d), stream: d.streamCreate() };
  }
  return gpu;
}

/** The folder holding tiny-moe's parity.json: the repository's fixtures/tiny-moe. */
export function fixtureDir(): string {
  return TINY_MOE;
}

/** The model folder: the repo's tracked copy of tiny-moe. */
export function modelDir(): string {
  return TINY_MOE_MODEL;
}

/** Fresh random values each run (seeded from the clock; the seed is printed for replay). */
export function rng(label: string): () => number {
  const seed = Number(process.env['GPU_TEST_SEED'] ?? (Date.now() ^ (label.length * 2654435761)) >>> 0);
  console.log(`# ${label}: seed ${seed}`);
  const u = mulberry32(seed);
  return () => u() * 2 - 1;
}

/** Random bf16 values: the bytes for the device and the exact float32 values for the CPU twin. */
export function randomBf16(n: number, r: () => number, scale = 1): { bytes: Uint8Array; f32: Float32Array } {
  const f32 = new Float32Array(n);
  const bits = new Uint16Array(n);
  const u = new Uint32Array(f32.buffer);
  for (let i = 0; i < n; i++) {
    f32[i] = r() * scale;
    u[i] = u[i]! & 0xffff0000; // truncate to bf16: exactly representable both sides
    bits[i] = u[i]! >>> 16;
  }
  return { bytes: new Uint8Array(bits.buffer), f32 };
}

export function randomF32(n: number, r: () => number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = r() * scale;
  return a;
}

/** ||got - ref|| / ||ref||; NaN or an unwritten (poisoned) element makes it Infinity. */
export function normErr(got: Float32Array, ref: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!;
    if (!Number.isFinite(g)) return Infinity;
    num += (g - ref[i]!) ** 2;
    den += ref[i]! ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

/** A device buffer holding `src`. */
export function upload(g: Gpu, src: ArrayBufferView, what: string): bigint {
  const p = g.d.alloc(src.byteLength, what);
  g.d.htod(p, src);
  return p;
}

/** A device buffer of `bytes` poisoned with 0xFF bytes (NaN as float32), so unwritten outputs fail. */
export function poisoned(g: Gpu, bytes: number, what: string): bigint {
  const p = g.d.alloc(bytes, what);
  g.d.memsetD8(p, 0xff, bytes);
  return p;
}
