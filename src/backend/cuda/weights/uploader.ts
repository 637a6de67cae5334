// Streams tensors from a TensorSource to where the GPU reads them: device memory through two pinned staging
// halves (the next piece is read from the shard while the last one is copied), or straight into mapped host
// memory (the cold bank), in their stored format: bf16, block FP8 values and their scale grids, or slices of
// gpt-oss's stacked MXFP4 expert tensors. Every
// tensor gets a finite check on the device as it lands (op_check_finite_bf16 / _fp8; FP8 scales are checked
// on the host as they are read), and finish() refuses the checkpoint naming the first tensor with a NaN or
// infinity, before anything is served. Host memory beyond what stays there by design: the staging.
import { ResidencyError } from '../../../errors.ts';
import type { TensorSource } from '../../../model/tensor-source.ts';
import type { CudaDriver } from '../driver/driver.ts';
import { ResourceScope } from '../driver/resource-scope.ts';
import { checkStackedDtype, readGrid, type ExpertSlice, type ProductWeights } from './device-weights.ts';
import { badE8m0, firstBadE8m0, fp8ScaleName, MXFP4_MAX_SCALE } from '../../../model/quant-read.ts';

export interface UploadProgress {
  (done: number, total: number, what: string): void;
}

export interface UploaderOptions {
  /** Bytes of each of the two pinned staging halves (default 64 MiB). */
  readonly stagingBytes?: number;
  /** Bytes this load will move (for progress; default the source's total). */
  readonly totalBytes?: number;
  readonly onProgress?: UploadProgress;
}

const DEFAULT_STAGING = 64 * 1024 * 1024;
const CHECK_THREADS = 256;
const CHECK_MAX_BLOCKS = 1024;

/** The finite-check kernels: bf16 tensors, and float8_e4m3fn ones. */
export interface CheckKernels {
  readonly bf16: bigint;
  readonly fp8?: bigint;
}

/** Bytes a value of each dtype the device keeps as stored. */
const STORED: Record<string, number> = { BF16: 2, F8_E4M3: 1 };

/** E8M0 scale bytes of an MXFP4 tensor at byte `at` of it: 255 is NaN, and over 252 overflows a weight (quant-read.ts's bound). */
function checkE8m0(name: string, bytes: Uint8Array, at: number): void {
  const bad = firstBadE8m0(bytes);
  if (bad >= 0) throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} holds an MXFP4 scale of ${badE8m0(bytes[bad]!)} at byte ${at + bad} (expected at most ${MXFP4_MAX_SCALE}): the checkpoint is corrupt; nothing was served`);
}

export class TensorUploader {
  private readonly halves: { host: Uint8Array; hostPtr: bigint }[];
  private readonly events: bigint[];
  private readonly stream: bigint;
  private readonly flagsDev: bigint;
  private readonly flagIndex = new Map<string, number>();
  private half = 0;
  private done = 0;
  private readonly total: number;
  /** Its own resources (staging, events, stream, flags): released by finish() or by the owner's scope on failure. */
  private readonly scope: ResourceScope;
  private finished = false;

  constructor(
    private readonly d: CudaDriver,
    private readonly source: TensorSource,
    private readonly checks: CheckKernels,
    private readonly opts: UploaderOptions = {},
  ) {
    this.scope = new ResourceScope('tensor uploader');
    try {
      const bytes = opts.stagingBytes ?? DEFAULT_STAGING;
      this.halves = [0, 1].map((i) => this.scope.acquire(`pinned staging ${i}`, () => d.allocPinned(bytes, `staging ${i}`), (h) => d.freeHost(h.hostPtr)));
      this.events = [0, 1].map(() => this.scope.acquire('staging event', () => d.eventCreate(), (e) => d.eventDestroy(e)));
      this.stream = this.scope.acquire('upload stream', () => d.streamCreate(), (s) => d.streamDestroy(s));
      let n = 0;
      for (const name of source.names()) this.flagIndex.set(name, n++);
      const flagBytes = 4 * Math.max(1, n);
      this.flagsDev = this.scope.acquire('finite flags', () => d.alloc(flagBytes, 'finite flags'), (p) => d.free(p));
      d.memsetD8(this.flagsDev, 0, flagBytes);
      this.total = opts.totalBytes ?? source.totalBytes;
    } catch (e) {
      throw this.scope.unwind(e);
    }
  }

  /** The tensor's stored bytes, checked to be `bf16` of `bytes` bytes (the GPU keeps weights as stored). */
  expectBf16(name: string, bytes?: number): number {
    const t = this.source.info(name);
    if (t.dtype !== 'BF16') {
      throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend keeps weights as bf16: tensor ${name} is ${t.dtype}; use --backend cpu`);
    }
    if (bytes !== undefined && t.bytes !== bytes) throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} has ${t.bytes} bytes: expected ${bytes}`);
    return t.bytes;
  }

  /** The tensor's stored bytes, checked to be bf16 or (with an fp8 check kernel) float8_e4m3fn, of `bytes` bytes. */
  expectStored(name: string, bytes?: number): number {
    const t = this.source.info(name);
    if (STORED[t.dtype] === undefined || (t.dtype === 'F8_E4M3' && this.checks.fp8 === undefined)) {
      const kinds = this.checks.fp8 === undefined ? 'bf16' : 'bf16 or block FP8';
      throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend keeps weights as stored (${kinds}): tensor ${name} is ${t.dtype}; use --backend cpu`);
    }
    if (bytes !== undefined && t.bytes !== bytes) throw new ResidencyError('BAD_CHECKPOINT', `tensor ${name} has ${t.bytes} bytes: expected ${bytes}`);
    return t.bytes;
  }

  /** Copies tensor `name` (bf16 or fp8, as stored) to device memory at `dst`, through the staging halves. */
  toDevice(name: string, dst: bigint, bytes?: number): void {
    const n = this.expectStored(name, bytes);
    this.staged(n, dst, (into, off) => this.source.read(name, into, off));
    this.check(name, dst, n);
  }

  /** Reads tensor `name` (as stored) straight into host memory the device maps at `devPtr` (a cold bank row). */
  toHost(name: string, host: Uint8Array, devPtr: bigint): void {
    const n = this.expectStored(name, host.byteLength);
    this.source.read(name, host);
    this.check(name, devPtr, n);
  }

  /** Copies product `p`'s values (its stacked matrices) to `dst` and, for fp8, its scale grid to `gridDst`. */
  productToDevice(p: ProductWeights, dst: bigint, gridDst: bigint): void {
    let at = 0;
    p.names.forEach((name, i) => {
      const n = this.partBytes(p, i);
      this.toDevice(name, dst + BigInt(at), n);
      at += n;
    });
    if (p.grid) this.bytesToDevice(this.grid(p), gridDst);
  }

  /** productToDevice into mapped host memory: values at host[0..], the grid at gridHost (a cold bank row). */
  productToHost(p: ProductWeights, host: Uint8Array, devPtr: bigint, gridHost?: Uint8Array): void {
    let at = 0;
    p.names.forEach((name, i) => {
      const n = this.partBytes(p, i);
      this.toHost(name, host.subarray(at, at + n), devPtr + BigInt(at));
      at += n;
    });
    if (p.grid) {
      if (!gridHost) throw new ResidencyError('INTERNAL', `productToHost: no room given for the scale grid of ${p.names[0]}`);
      gridHost.set(this.grid(p));
    }
  }

  /**
   * Copies bytes [offset, offset + bytes) of tensor `name` (one expert's slice of a stacked tensor, gpt-oss)
   * to device memory at `dst`, checked as `check` says (bf16 on the device; E8M0 scales on the host).
   */
  sliceToDevice(x: ExpertSlice, dst: bigint): void {
    this.expectSlice(x);
    this.staged(x.bytes, dst, (into, off) => {
      this.source.read(x.name, into, x.offset + off);
      if (x.check === 'e8m0') checkE8m0(x.name, into, x.offset + off);
    });
    this.sliceLanded(x, dst);
  }

  /** sliceToDevice into mapped host memory (a cold bank row). */
  sliceToHost(x: ExpertSlice, host: Uint8Array, devPtr: bigint): void {
    if (host.byteLength !== x.bytes) throw new ResidencyError('INTERNAL', `sliceToHost: ${host.byteLength} bytes of room for ${x.bytes} of ${x.name}`);
    this.expectSlice(x);
    this.source.read(x.name, host, x.offset);
    if (x.check === 'e8m0') checkE8m0(x.name, host, x.offset);
    this.sliceLanded(x, devPtr);
  }

  /** Every layer's stacked tensor stored as layer 0's (the row layout's): bf16 biases, uint8 blocks and scales. */
  private expectSlice(x: ExpertSlice): void {
    checkStackedDtype(x.name, this.source.info(x.name).dtype, x.check === 'bf16' ? 'BF16' : 'U8');
  }

  private sliceLanded(x: ExpertSlice, ptr: bigint): void {
    if (x.check === 'bf16') {
      this.check(x.name, ptr, x.bytes);
      return;
    }
    this.done += x.bytes;
    this.opts.onProgress?.(this.done, this.total, `uploading ${x.name}`);
  }

  /** Bytes of the product's i-th matrix, its tensor checked to be stored in the product's format. */
  private partBytes(p: ProductWeights, i: number): number {
    const name = p.names[i]!;
    const want = p.format === 'fp8' ? 'F8_E4M3' : 'BF16';
    const t = this.source.info(name);
    if (t.dtype !== want) throw new ResidencyError('UNSUPPORTED_MODEL', `cuda backend: tensor ${name} is ${t.dtype} where ${want} is expected (its like in layer 0 is stored so: every layer's and expert's must be alike); use --backend cpu`);
    return p.partRows[i]! * p.cols * (p.format === 'fp8' ? 1 : 2);
  }

  /** The product's scale grid as bytes, its scale tensors counted as loaded. */
  private grid(p: ProductWeights): Uint8Array {
    const g = readGrid(this.source, p);
    for (const name of p.names) this.done += this.source.info(fp8ScaleName(name)).bytes;
    return new Uint8Array(g.buffer, g.byteOffset, g.byteLength);
  }

  /** Copies bytes computed on the host (checked there) to device memory at `dst`, through the staging halves. */
  private bytesToDevice(data: Uint8Array, dst: bigint): void {
    this.staged(data.byteLength, dst, (into, off) => into.set(data.subarray(off, off + into.byteLength)));
  }

  /** n bytes to device memory at dst through the staging halves, `fill` writing each piece (at `off`) into a half. */
  private staged(n: number, dst: bigint, fill: (into: Uint8Array, off: number) => void): void {
    const cap = this.halves[0]!.host.byteLength;
    for (let off = 0; off < n; off += cap) {
      const len = Math.min(cap, n - off);
      const h = this.halves[this.half]!;
      this.d.eventSync(this.events[this.half]!); // the copy that last used this half is done
      fill(h.host.subarray(0, len), off);
      this.d.htodAsync(dst + BigInt(off), h.hostPtr, len, this.stream);
      this.d.eventRecord(this.events[this.half]!, this.stream);
      this.half ^= 1;
    }
  }

  /**
   * Waits for every copy and check, releases the staging, and refuses the checkpoint if a tensor held a
   * NaN or an infinity (BAD_CHECKPOINT naming it). Idempotent.
   */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    try {
      this.d.streamSync(this.stream, 'upload');
      const flags = new Uint32Array(Math.max(1, this.flagIndex.size));
      this.d.dtoh(flags, this.flagsDev);
      const bad = [...this.flagIndex].filter(([, i]) => flags[i] !== 0).map(([name]) => name);
      if (bad.length > 0) {
        const more = bad.length > 1 ? ` (and ${bad.length - 1} more tensor(s))` : '';
        throw new ResidencyError('BAD_CHECKPOINT', `tensor ${bad[0]} holds NaN or infinite values${more}: the checkpoint is corrupt; nothing was served`);
      }
    } finally {
      this.scope.close();
    }
  }

  /** Releases staging and flags without checking (a failed load). */
  abandon(): void {
    if (this.finished) return;
    this.finished = true;
    this.scope.close();
  }

  private check(name: string, ptr: bigint, bytes: number): void {
    const idx = this.flagIndex.get(name)!;
    const fp8 = this.source.info(name).dtype === 'F8_E4M3';
    const n = fp8 ? bytes : bytes / 2;
    const blocks = Math.max(1, Math.min(CHECK_MAX_BLOCKS, Math.ceil(n / CHECK_THREADS)));
    this.d.launch(fp8 ? this.checks.fp8! : this.checks.bf16, fp8 ? 'op_check_finite_fp8' : 'op_check_finite_bf16', [blocks, 1, 1], CHECK_THREADS, 0, this.stream,
      [{ u64: ptr }, { u64: BigInt(n) }, { u64: this.flagsDev }, { i32: idx }]);
    this.done += bytes;
    this.opts.onProgress?.(this.done, this.total, `uploading ${name}`);
  }
}
