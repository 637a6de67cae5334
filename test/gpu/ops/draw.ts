// Fresh random inputs of the op tests, drawn as stored: bf16 values exact (the device and the CPU see the same
// numbers), block-FP8 e4m3 bytes (never the NaN codes) with float32 block scales, MXFP4 E2M1 nibbles with E8M0
// scale bytes. Seeded from the clock, or GPU_TEST_SEED for a replay; the seed is printed.
// Large weights are filled from a few MiB of random values copied at random offsets: distinct experts get distinct
// bytes at memcpy speed (real-size expert rows are hundreds of MiB).
import { mulberry32 } from '../../../src/util/rng.ts';

const POOL_BYTES = 1 << 22;

export class Draw {
  readonly seed: number;
  private readonly u: () => number;
  private readonly pools = new Map<string, Uint8Array>();

  constructor(label: string) {
    this.seed = Number(process.env['GPU_TEST_SEED'] ?? (Date.now() >>> 0));
    console.log(`# ${label}: seed ${this.seed} (GPU_TEST_SEED replays it)`);
    this.u = mulberry32(this.seed);
  }

  /** Uniform in [0, 1). */
  unit(): number {
    return this.u();
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.u() * n);
  }

  /** Uniform float32 values in (-scale, scale). */
  f32(n: number, scale = 1): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = (this.u() * 2 - 1) * scale;
    return a;
  }

  /** bf16 values in (-scale, scale) (float32 truncated to bf16: exact on both sides): their bits and float32 values. */
  bf16(n: number, scale = 1): { bits: Uint16Array; f32: Float32Array } {
    const f32 = this.f32(n, scale);
    const u = new Uint32Array(f32.buffer);
    const bits = new Uint16Array(n);
    for (let i = 0; i < n; i++) {
      u[i] = u[i]! & 0xffff0000;
      bits[i] = u[i]! >>> 16;
    }
    return { bits, f32 };
  }

  /** `n` distinct integers of [0, m), in random order. */
  distinct(n: number, m: number): number[] {
    const a = Array.from({ length: m }, (_, i) => i);
    for (let i = 0; i < n; i++) {
      const j = i + this.int(m - i);
      [a[i], a[j]] = [a[j]!, a[i]!];
    }
    return a.slice(0, n);
  }

  /** Fills `dst` with random bytes of a kind: 'bf16' values of (-1, 1), 'fp8' e4m3 codes (no NaN), 'fp4' any E2M1 nibbles. */
  fill(dst: Uint8Array, kind: 'bf16' | 'fp8' | 'fp4'): Uint8Array {
    const pool = this.pool(kind);
    const step = 1 << 16;
    for (let at = 0; at < dst.length; at += step) {
      const n = Math.min(step, dst.length - at);
      const from = 2 * this.int((pool.length - n) >> 1); // even: bf16 pairs stay whole
      dst.set(pool.subarray(from, from + n), at);
    }
    return dst;
  }

  /** Random bytes of a kind (fill). */
  bytes(n: number, kind: 'bf16' | 'fp8' | 'fp4'): Uint8Array {
    return this.fill(new Uint8Array(n), kind);
  }

  /** Block-FP8 scales (float32, like a checkpoint's weight_scale_inv: ~2^-9 .. 2^-6). */
  fp8Scales(n: number): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = 2 ** (-9 + 3 * this.u());
    return a;
  }

  /** E8M0 scale bytes of 2^-8 .. 2^-4 (sums of a few units: gpt-oss's clamp at 7 binds some units, not all). */
  e8m0(n: number): Uint8Array {
    const a = new Uint8Array(n);
    for (let i = 0; i < n; i++) a[i] = 119 + this.int(5);
    return a;
  }

  private pool(kind: 'bf16' | 'fp8' | 'fp4'): Uint8Array {
    let p = this.pools.get(kind);
    if (p) return p;
    p = new Uint8Array(POOL_BYTES);
    if (kind === 'bf16') p.set(new Uint8Array(this.bf16(POOL_BYTES / 2).bits.buffer));
    else {
      for (let i = 0; i < POOL_BYTES; i++) p[i] = this.int(256);
      // 0x7F and 0xFF are e4m3's NaN codes: a checkpoint never holds them (the loaders refuse them).
      if (kind === 'fp8') for (let i = 0; i < POOL_BYTES; i++) if ((p[i]! & 0x7f) === 0x7f) p[i] = p[i]! & 0xfe;
    }
    this.pools.set(kind, p);
    return p;
  }
}
