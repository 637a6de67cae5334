// Streams tensors from a TensorSource to where the GPU reads them: device memory through two pinned staging
// halves (the next piece is read from the shard while the last one is copied), or straight into mapped host
// memory (the cold bank). Every tensor gets a finite check on the device as it lands (op_check_finite_bf16),
// and finish() refuses the checkpoint naming the first tensor with a NaN or infinity, before anything is
// served. Host memory beyond what stays there by design: the staging, nothing else.
import { ResidencyError } from '../../errors.ts';
import type { TensorSource } from '../../model/tensor-source.ts';
import type { CudaDriver } from './driver.ts';
import { ResourceScope } from './resource-scope.ts';

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
    private readonly checkFn: bigint,
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

  /** Copies tensor `name` (bf16) to device memory at `dst`, through the staging halves. */
  toDevice(name: string, dst: bigint, bytes?: number): void {
    const n = this.expectBf16(name, bytes);
    const cap = this.halves[0]!.host.byteLength;
    for (let off = 0; off < n; off += cap) {
      const len = Math.min(cap, n - off);
      const h = this.halves[this.half]!;
      this.d.eventSync(this.events[this.half]!); // the copy that last used this half is done
      this.source.read(name, h.host.subarray(0, len), off);
      this.d.htodAsync(dst + BigInt(off), h.hostPtr, len, this.stream);
      this.d.eventRecord(this.events[this.half]!, this.stream);
      this.half ^= 1;
    }
    this.check(name, dst, n);
  }

  /** Reads tensor `name` (bf16) straight into host memory the device maps at `devPtr` (a cold bank row). */
  toHost(name: string, host: Uint8Array, devPtr: bigint): void {
    const n = this.expectBf16(name, host.byteLength);
    this.source.read(name, host);
    this.check(name, devPtr, n);
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
    const n = bytes / 2;
    const blocks = Math.max(1, Math.min(CHECK_MAX_BLOCKS, Math.ceil(n / CHECK_THREADS)));
    this.d.launch(this.checkFn, 'op_check_finite_bf16', [blocks, 1, 1], CHECK_THREADS, 0, this.stream,
      [{ u64: ptr }, { u64: BigInt(n) }, { u64: this.flagsDev }, { i32: idx }]);
    this.done += bytes;
    this.opts.onProgress?.(this.done, this.total, `uploading ${name}`);
  }
}
