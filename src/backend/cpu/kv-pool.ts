// The CPU backend's paged KV cache: per layer one array of key rows and one of value rows, [blocks x blockSize]
// rows each (MLA: every head's expanded key and value, computed from the latent as stored), in the kernel's memory
// when it runs (its attention reads them in place), else where the JS loops and threads read them. Values are kept
// as float32 rounded to the pool's dtype (kv-dtype.ts): the same numbers a device keeping bf16 or fp8 reads back,
// at float32's size.
import { ResidencyError } from '../../errors.ts';
import type { KvCacheDtype, KvPool } from '../backend.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { Alloc } from './alloc.ts';
import { DEFAULT_BLOCK_SIZE } from '../kv-block.ts';

/** How big the pool is and how it stores (every field optional: cpuKvDefaults). */
export interface CpuKvOptions {
  /** Positions a block holds (default 16, vLLM's). */
  readonly blockSize?: number;
  readonly dtype?: KvCacheDtype;
  /** The pool's size, the first given of: blocks, positions (--kv-cache-tokens), bytes (--kv-cache-memory). */
  readonly blocks?: number;
  readonly tokens?: number;
  readonly bytes?: number;
}

export { DEFAULT_BLOCK_SIZE };
/** Without a size: room for 4 sequences at the model's full context, at most this many bytes. */
export const DEFAULT_CPU_KV_BYTES = 512 * 1024 * 1024;

/** Floats one position takes in one layer: keys, values (MLA: every head's expanded key and value). */
export function kvWidths(spec: ModelSpec): { key: number; value: number } {
  const m = spec.mla;
  return m
    ? { key: spec.numHeads * (m.qkNopeDim + spec.headDim), value: spec.numHeads * m.vHeadDim }
    : { key: spec.numKvHeads * spec.headDim, value: spec.numKvHeads * spec.headDim };
}

/** Bytes one block of `blockSize` positions takes on the CPU (float32 keys and values of every layer). */
export function cpuBytesPerBlock(spec: ModelSpec, blockSize: number): number {
  const w = kvWidths(spec);
  return spec.numLayers * blockSize * (w.key + w.value) * 4;
}

/** The blocks the options ask for (refused naming the field when they come to none). */
export function cpuKvBlocks(spec: ModelSpec, o: CpuKvOptions): number {
  const bs = o.blockSize ?? DEFAULT_BLOCK_SIZE;
  const perBlock = cpuBytesPerBlock(spec, bs);
  const check = (n: number, field: string, v: number): number => {
    if (!Number.isInteger(n) || n < 1) throw new ResidencyError('BAD_ARGUMENT', `${field} ${v}: holds no block of ${bs} positions (${perBlock} bytes a block here)`);
    return n;
  };
  if (o.blocks !== undefined) return check(o.blocks, 'KV blocks', o.blocks);
  if (o.tokens !== undefined) return check(Math.ceil(o.tokens / bs), '--kv-cache-tokens', o.tokens);
  if (o.bytes !== undefined) return check(Math.floor(o.bytes / perBlock), '--kv-cache-memory', o.bytes);
  const want = Math.ceil((4 * spec.maxPositions) / bs);
  return Math.max(1, Math.min(want, Math.floor(DEFAULT_CPU_KV_BYTES / perBlock)));
}

export class CpuKvPool implements KvPool {
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly dtype: KvCacheDtype;
  readonly bytesPerBlock: number;
  /** Per layer: [numBlocks x blockSize][key width], [..][value width]. */
  readonly keys: Float32Array[] = [];
  readonly values: Float32Array[] = [];
  private readonly keyWidth: number;
  private readonly valueWidth: number;

  constructor(spec: ModelSpec, alloc: Alloc, o: CpuKvOptions = {}) {
    const bs = o.blockSize ?? DEFAULT_BLOCK_SIZE;
    if (!Number.isInteger(bs) || bs < 1 || bs > 1024) throw new ResidencyError('BAD_ARGUMENT', `--block-size ${bs}: expected an integer in 1..1024`);
    this.blockSize = bs;
    this.numBlocks = cpuKvBlocks(spec, o);
    this.dtype = o.dtype ?? 'float32';
    this.bytesPerBlock = cpuBytesPerBlock(spec, bs);
    const w = kvWidths(spec);
    this.keyWidth = w.key;
    this.valueWidth = w.value;
    const rows = this.numBlocks * bs;
    for (let l = 0; l < spec.numLayers; l++) {
      this.keys.push(alloc.f32(rows * w.key));
      this.values.push(alloc.f32(rows * w.value));
    }
  }

  /** Positions the pool holds in all. */
  get positions(): number {
    return this.numBlocks * this.blockSize;
  }

  /** Copies every layer's rows of block src into block dst, pair by pair (all checked first: a bad pair copies nothing). */
  copyBlocks(pairs: readonly (readonly [number, number])[]): void {
    for (const [src, dst] of pairs) {
      for (const [what, b] of [['src', src], ['dst', dst]] as const) {
        if (!Number.isInteger(b) || b < 0 || b >= this.numBlocks) throw new ResidencyError('BAD_ARGUMENT', `copyBlocks: ${what} block ${b} is not in [0, ${this.numBlocks})`);
      }
    }
    const bs = this.blockSize;
    for (const [src, dst] of pairs) {
      if (src === dst) continue;
      for (let l = 0; l < this.keys.length; l++) {
        this.keys[l]!.copyWithin(dst * bs * this.keyWidth, src * bs * this.keyWidth, (src + 1) * bs * this.keyWidth);
        this.values[l]!.copyWithin(dst * bs * this.valueWidth, src * bs * this.valueWidth, (src + 1) * bs * this.valueWidth);
      }
    }
  }
}
