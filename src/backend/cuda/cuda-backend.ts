// The CUDA backend: the whole Qwen3-MoE forward on one GPU, bf16 weights as stored, fp32 compute. A decode
// step is 2 kernels per layer + 1 (LM head + argmax) (or, fused, 1 + 1), captured once per batch-size bucket into a CUDA graph
// and replayed; every per-step input (tokens, positions, KV pointers, the count flag) and every table a
// swap touches (slots, counter) lives in device memory, so graphs stay valid for the backend's lifetime.
import { ResidencyError } from '../../errors.ts';
import { checkCudaSupport } from './support.ts';
import { type Backend, type SequenceChunk, type StepInput, type StepOutput } from '../backend.ts';
import { argmaxOfRow } from './argmax-keys.ts';
import { logitsOut } from '../logits-out.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { RawTensor } from '../../model/weights.ts';
import { EMBED, FINAL_NORM, LM_HEAD, layerTensorNames } from '../../model/architecture.ts';
import type { BankPlacement } from '../slot-tables.ts';
import { CudaExpertBanks } from './banks.ts';
import { expertRowLayout } from './device-weights.ts';
import { checkStepChunks } from './step-chunks.ts';
import { scatterRouting } from './routing-record.ts';
import { mapTensorSource, type TensorSource } from '../../model/tensor-source.ts';
import { TensorUploader, type UploadProgress } from './uploader.ts';
import { loadDriver, type CudaDriver, type KernelArg } from './driver.ts';
import { ROW_PATH_GROUPS, loadKernelModules, setModelConstants, type KernelName, type LoadedKernels } from './kernels.ts';
import {
  ROW_DEV_BYTES, STEP_HEADER_BYTES, decodeLayersSmemBytes, encodeLayers, expertFfnSmemBytes, lmHeadSmemBytes, rowSmemBytes, encodeModel, encodeStep, encodeWork,
  type ModelDims, type RowInput, type WorkPointers,
} from './layout.ts';
import { ResourceScope, type ReleaseFailureSink } from './resource-scope.ts';
import { DEFAULT_BUCKETS, attnGridFor, attnMaxSplits, bucketFor, planSubsteps, type AttnGrid, type PlannedRow } from './plan.ts';

export interface CudaBackendOptions {
  /** Initial hot/cold placement (default: every expert hot). */
  readonly placement?: BankPlacement;
  /** Spare hot rows per layer that background moves land in, and row copies queued at once (see banks.ts). */
  readonly spareRows?: number;
  readonly copiesInFlight?: number;
  /** Batch-size buckets to capture graphs for (ascending); a step's rows are split to the largest. */
  readonly buckets?: readonly number[];
  /** Replay captured graphs (default) or launch each kernel eagerly (for A/B timing and debugging). */
  readonly graphs?: boolean;
  /**
   * One fused kernel for all layers of a row, or the layered path (default): attn_route + expert_ffn per
   * layer (an expert block per pick), 13 kernels in one graph. Same math, same results; the layered graph
   * measured faster on the H200 at batch 1, 4 and 16 (bench/gpu/NOTES.md), so it is the default. A fused
   * backend still runs a sub-step with a row past ATTN_SPLIT_MIN positions on the layered graph, whose
   * attention splits the positions over several blocks (decode_layers keeps one block per row).
   */
  readonly fused?: boolean;
  /** Threads per row block of decode_layers / attn_route (default 1024; 256 and 512 for tuning). */
  readonly rowThreads?: number;
  /**
   * Most blocks one row's attention is split over at long contexts (the flash-decoding split of attn_route;
   * default: attnMaxSplits per bucket, from the SM count). 1 turns the split off: one block walks every
   * position, as before the split (A/B timing, and the GPU test's reference).
   */
  readonly attnSplits?: number;
  /** Directory of the compiled fatbins (default: found next to the bundle or in dist/kernels). */
  readonly kernelDir?: string;
  /** Where a failed release during dispose() or a failed construction is reported (default: a warning line). */
  readonly onReleaseFailure?: ReleaseFailureSink;
  /** Upload progress in bytes (the CLI's progress line). */
  readonly onProgress?: UploadProgress;
}

/** A model as the CUDA backends take it: the spec and its stored tensors (streamed from the shards, or in memory). */
export interface CudaModel {
  readonly spec: ModelSpec;
  readonly tensors?: TensorSource;
  readonly raw?: ReadonlyMap<string, RawTensor>;
}

/** The stored tensors of a model: its source, or its raw map as one. */
export function tensorsOf(model: CudaModel): TensorSource {
  if (model.tensors) return model.tensors;
  if (model.raw) return mapTensorSource(model.raw);
  throw new ResidencyError('INTERNAL', 'cuda backend: the model has neither a tensor source nor raw tensors');
}

const ROW_THREADS = 1024; // decode_layers / attn_route: one block per row (default)
const FFN_THREADS = 128; // expert_ffn: a thread per output row (>= expert intermediate)
const LM_THREADS = 256; // lm_head_argmax: 16 row groups x 4 rows in flight
const LM_ROWS_PER_BLOCK = 128;

/** The row path (this class: one block per token's layer, for tiny models). Real shapes: createCuda in op/. */
export async function createCudaBackend(model: CudaModel, opts: CudaBackendOptions = {}): Promise<CudaBackend> {
  const d = await loadDriver();
  return new CudaBackend(d, model.spec, tensorsOf(model), opts);
}

export class CudaBackend implements Backend {
  readonly name = 'cuda';
  readonly banks: CudaExpertBanks;
  readonly dims: ModelDims;
  readonly stream: bigint;
  readonly buckets: readonly number[];
  useGraphs: boolean;
  readonly fused: boolean;
  readonly rowThreads: number;
  private readonly fns: Map<KernelName, bigint>;
  /**
   * Everything this backend holds on the driver (modules, stream, banks, buffers, pinned blocks, and later
   * graphs and KV caches), released last-acquired-first by dispose() or a failed constructor.
   */
  private readonly scope: ResourceScope;
  private readonly modelDev: bigint;
  private readonly counterDev: bigint;
  private readonly stepDev: bigint;
  private readonly stepHost: { host: Uint8Array; hostPtr: bigint };
  private readonly logitsHost: { host: Uint8Array; hostPtr: bigint };
  private readonly picksHost: { host: Uint8Array; hostPtr: bigint };
  private readonly amaxHost: { host: Uint8Array; hostPtr: bigint };
  readonly work: WorkPointers;
  private readonly workBytes: Uint8Array;
  /**
   * Captured graphs by bucket, path and attention grid (`${bucket}/layered/short`, `${bucket}/layered/long`,
   * `${bucket}/fused/short`): the long graph is captured with attn_route's split grid, the short one with one
   * block per row, so a replay only serves the steps its grid was chosen for (attnGridFor).
   */
  private readonly graphs = new Map<string, bigint>();
  private readonly attnSplitsOpt: number | undefined;
  private readonly seqs = new Map<number, { kv: bigint; cap: number }>();
  private readonly rowSmem: number;
  private readonly decodeSmem: number;
  private disposed = false;
  /** Device buffer for decode_layers' phase clocks (0: off). */
  private profileDev = 0n;

  constructor(readonly driver: CudaDriver, readonly spec: ModelSpec, tensors: TensorSource | ReadonlyMap<string, RawTensor>, opts: CudaBackendOptions = {}) {
    const source = tensors instanceof Map ? mapTensorSource(tensors) : (tensors as TensorSource);
    const d = driver;
    const s = spec;
    this.buckets = opts.buckets ?? DEFAULT_BUCKETS;
    this.useGraphs = opts.graphs ?? true;
    this.fused = opts.fused ?? false;
    this.rowThreads = opts.rowThreads ?? ROW_THREADS;
    if (opts.attnSplits !== undefined && (!Number.isInteger(opts.attnSplits) || opts.attnSplits < 1 || opts.attnSplits > 65535)) {
      throw new ResidencyError('BAD_ARGUMENT', `attnSplits ${opts.attnSplits}: expected an integer in [1, 65535]`);
    }
    this.attnSplitsOpt = opts.attnSplits;
    checkCudaSupport(s, this.rowThreads, FFN_THREADS, this.fused); // before anything is allocated
    const scope = new ResourceScope('cuda backend', opts.onReleaseFailure);
    this.scope = scope;
    // All or nothing: every module, stream and buffer is recorded in the scope as it is acquired, so a
    // failure half way (out of memory, a tensor that is not bf16, a missing fatbin) releases all of them.
    try {
      const kernels: LoadedKernels = loadKernelModules(d, scope, opts.kernelDir, new Set(opts.attnSplits === 1 ? ['attn_route_split'] as const : []), ROW_PATH_GROUPS);
      this.fns = kernels.fns;
      this.stream = scope.acquire('stream', () => d.streamCreate(), (st) => d.streamDestroy(st));
      const uploader = scope.adopt(new TensorUploader(d, source, { bf16: this.fns.get('op_check_finite_bf16')! }, opts.onProgress ? { onProgress: opts.onProgress } : {}), 'tensor uploader', (u) => u.abandon());
      this.banks = scope.adopt(new CudaExpertBanks(d, s, uploader, expertRowLayout(source, s), this.stream, {
        ...(opts.placement ? { placement: opts.placement } : {}), ...(opts.onReleaseFailure ? { onReleaseFailure: opts.onReleaseFailure } : {}),
        ...(opts.spareRows !== undefined ? { spareRows: opts.spareRows } : {}), ...(opts.copiesInFlight !== undefined ? { copiesInFlight: opts.copiesInFlight } : {}),
      }), 'expert banks', (b) => b.dispose());
      const up = (name: string): bigint => {
        const p = this.alloc(uploader.expectBf16(name), name);
        uploader.toDevice(name, p);
        return p;
      };
      const E = s.numExperts;
      const layers = Array.from({ length: s.numLayers }, (_, l) => {
        const n = layerTensorNames(l);
        return {
          inNorm: up(n.inputNorm), qProj: up(n.qProj), kProj: up(n.kProj), vProj: up(n.vProj), oProj: up(n.oProj),
          qNorm: up(n.qNorm), kNorm: up(n.kNorm), postNorm: up(n.postAttnNorm), router: up(n.router),
          hot: this.banks.hotDev[l]!, cold: this.banks.coldDev[l]!, slots: this.banks.slotTableDev + BigInt(4 * l * E),
        };
      });
      const layersBytes = encodeLayers(layers);
      const layersDev = this.alloc(layersBytes.byteLength, 'layer descriptors');
      d.htod(layersDev, layersBytes);
      const embed = up(EMBED);
      const lmHead = s.tieWordEmbeddings ? embed : up(LM_HEAD);
      this.counterDev = this.alloc(4 * s.numLayers * E, 'counter table');
      d.memsetD8(this.counterDev, 0, 4 * s.numLayers * E);
      this.dims = {
        H: s.hiddenSize, nh: s.numHeads, nkv: s.numKvHeads, hd: s.headDim, E, K: s.topK, I: s.expertIntermediate,
        V: s.vocabSize, L: s.numLayers, normTopk: s.normTopkProb, hotRows: this.banks.hotRowsAllocated, maxPos: s.maxPositions,
        eps: s.rmsNormEps, theta: s.ropeTheta,
      };
      const modelBytes = encodeModel(this.dims, { embed, finalNorm: up(FINAL_NORM), lmHead, counter: this.counterDev, layers: layersDev });
      this.modelDev = this.alloc(modelBytes.byteLength, 'model descriptor');
      d.htod(this.modelDev, modelBytes);
      for (const group of ['layer', 'moe'] as const) setModelConstants(d, kernels.modules.get(group)!, modelBytes, layersBytes);

      const B = this.buckets[this.buckets.length - 1]!;
      const { H, K, L, V } = this.dims;
      this.work = {
        hidden: this.alloc(4 * B * H, 'hidden'), xn: this.alloc(4 * B * H, 'xn'),
        pickExpert: this.alloc(4 * B * L * K, 'picks'), pickWeight: this.alloc(4 * B * L * K, 'pick weights'),
        pickSlot: this.alloc(4 * B * K, 'pick slots'), partial: this.alloc(4 * B * K * H, 'expert outputs'),
        logits: this.alloc(4 * B * V, 'logits'), amax: this.alloc(8 * B, 'argmax'),
        // Sized for the bucket with the most split blocks in all; one partial = nh*hd + 2*nh floats.
        attnPart: this.alloc(4 * Math.max(...this.buckets.map((b) => b * this.attnSplits(b))) * (s.numHeads * s.headDim + 2 * s.numHeads), 'attention partials'),
        attnDone: this.alloc(4 * B, 'attention split counts'),
      };
      d.memsetD8(this.work.attnDone, 0, 4 * B); // the kernel's count starts at zero and is reset by its last block
      this.workBytes = encodeWork(this.work);
      const stepBytes = STEP_HEADER_BYTES + B * ROW_DEV_BYTES;
      this.stepDev = this.alloc(stepBytes, 'step input');
      this.stepHost = this.allocPinned(stepBytes, 'step input');
      this.logitsHost = this.allocPinned(4 * B * V, 'logits');
      this.picksHost = this.allocPinned(8 * B * L * K, 'routing record');
      this.amaxHost = this.allocPinned(8 * B, 'argmax');
      this.rowSmem = rowSmemBytes(this.dims, this.rowThreads);
      this.decodeSmem = decodeLayersSmemBytes(this.dims, this.rowThreads);
      if (this.rowSmem > 48 * 1024) {
        for (const k of ['attn_route', 'attn_route_split'] as const) {
          const fn = this.fns.get(k);
          if (fn !== undefined) d.setMaxDynamicSmem(fn, this.rowSmem, k);
        }
      }
      if (this.decodeSmem > 48 * 1024) d.setMaxDynamicSmem(this.fns.get('decode_layers')!, this.decodeSmem, 'decode_layers');
      uploader.finish(); // every weight landed and is finite, before the first step
    } catch (e) {
      throw scope.unwind(e);
    }
  }

  openSequence(seq: number, capacity: number): void {
    if (this.disposed) throw new ResidencyError('INTERNAL', 'cuda backend used after dispose()');
    if (this.seqs.has(seq)) throw new ResidencyError('BAD_ARGUMENT', `openSequence: seq ${seq} is already open`);
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > this.spec.maxPositions) {
      throw new ResidencyError('BAD_ARGUMENT', `openSequence: capacity ${capacity} must be an integer in [1, ${this.spec.maxPositions}]`);
    }
    const bytes = this.spec.numLayers * capacity * 2 * this.dims.nkv * this.dims.hd * 4;
    const what = `KV cache of seq ${seq} (${capacity} positions)`;
    const kv = this.scope.acquire(what, () => this.driver.alloc(bytes, what), (p) => this.driver.free(p));
    this.seqs.set(seq, { kv, cap: capacity });
  }

  closeSequence(seq: number): void {
    const c = this.seqs.get(seq);
    if (!c) return;
    this.driver.streamSync(this.stream, 'closeSequence');
    this.seqs.delete(seq);
    this.scope.releaseEarly(c.kv);
  }

  forward(input: StepInput): StepOutput {
    const { V, L, K } = this.dims;
    const chunks = input.chunks;
    const T = this.validate(chunks);
    const record = input.recordRouting === true;
    // argmaxOnly: the LM head kernel's argmax keys (a word pair a row) come back instead of the logits.
    const argmaxOnly = input.argmaxOnly === true;
    const logits = argmaxOnly ? new Float32Array(0) : logitsOut(input, V);
    const argmax = argmaxOnly ? new Int32Array(chunks.length) : undefined;
    const routing = record ? new Int32Array(T * L * K) : undefined;
    const routingWeights = record ? new Float32Array(T * L * K) : undefined;
    for (const rows of planSubsteps(chunks, this.buckets[this.buckets.length - 1]!)) {
      this.runRows(rows, input.count);
      const lastRows = rows.map((r, i) => (r.last ? i : -1)).filter((i) => i >= 0);
      const n = rows.length;
      if (lastRows.length > 0) {
        if (argmax) this.driver.dtohAsync(this.amaxHost.hostPtr, this.work.amax, 8 * n, this.stream);
        else this.driver.dtohAsync(this.logitsHost.hostPtr, this.work.logits, 4 * n * V, this.stream);
      }
      if (record) {
        this.driver.dtohAsync(this.picksHost.hostPtr, this.work.pickExpert, 4 * n * L * K, this.stream);
        this.driver.dtohAsync(this.picksHost.hostPtr + BigInt(4 * n * L * K), this.work.pickWeight, 4 * n * L * K, this.stream);
      }
      this.driver.streamSync(this.stream, 'forward');
      if (argmax) {
        for (const i of lastRows) argmax[rows[i]!.chunk] = argmaxOfRow(this.amaxHost.host, i, 1);
      } else {
        const lh = new Float32Array(this.logitsHost.host.buffer, this.logitsHost.host.byteOffset, n * V);
        for (const i of lastRows) logits.set(lh.subarray(i * V, (i + 1) * V), rows[i]!.chunk * V);
      }
      if (routing && routingWeights) scatterRouting(this.picksHost.host, rows, L * K, routing, routingWeights);
    }
    const out: StepOutput = argmax ? { logits, argmax } : { logits };
    return record ? { ...out, routing, routingWeights } : out;
  }

  readCounter(): Uint32Array {
    const out = new Uint32Array(this.dims.L * this.dims.E);
    this.driver.streamSync(this.stream, 'readCounter');
    this.driver.dtoh(out, this.counterDev);
    return out;
  }

  /**
   * Releases everything the backend holds, last acquired first: graphs and KV caches, buffers, pinned
   * blocks, banks, the stream, the modules. Idempotent. A release that fails is reported (onReleaseFailure)
   * and the others still run, so one bad handle never leaks the rest.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    // Recorded last so it runs first: queued work may still read the buffers about to be freed.
    this.scope.defer('wait for the stream', () => this.driver.streamSync(this.stream, 'dispose'));
    this.scope.close();
    this.graphs.clear();
    this.seqs.clear();
  }

  /** attn_route's grid height for a bucket: the most blocks a row's positions are split over. */
  attnSplits(bucket: number): number {
    return this.attnSplitsOpt ?? attnMaxSplits(bucket, this.driver.smCount, this.spec.maxPositions);
  }

  /** Uploads one sub-step's rows (padded to its bucket) and runs it: graph replay or eager launches. */
  runRows(rows: readonly PlannedRow[], count: boolean): number {
    const bucket = bucketFor(rows.length, this.buckets);
    // Split grid only when some row reads more than ATTN_SPLIT_MIN positions; the host knows every row's
    // position here. Fused backend, long context: the layered step (its attention splits the positions;
    // decode_layers can't).
    const { grid } = attnGridFor(rows.map((r) => r.pos), this.attnSplits(bucket));
    const fused = this.fused && grid === 'short';
    const inputs: RowInput[] = rows.map((r) => {
      const c = this.seqs.get(r.seq)!;
      return { token: r.token, pos: r.pos, valid: true, cap: c.cap, kv: c.kv };
    });
    const n = encodeStep(this.stepHost.host, count, inputs, bucket);
    this.driver.htodAsync(this.stepDev, this.stepHost.hostPtr, n, this.stream);
    if (this.useGraphs) this.driver.graphLaunch(this.graphFor(bucket, fused, grid), this.stream);
    else this.enqueueStep(bucket, fused, grid);
    return bucket;
  }

  /** The keys of the graphs captured so far (`${bucket}/${path}/${grid}`), for tests. */
  graphKeys(): string[] {
    return [...this.graphs.keys()];
  }

  /** The captured graph of one bucket, path and attention grid (captured on first use). */
  graphFor(bucket: number, fused = this.fused, grid: AttnGrid = 'short'): bigint {
    const key = `${bucket}/${fused ? 'fused' : 'layered'}/${grid}`;
    let g = this.graphs.get(key);
    if (g === undefined) {
      const what = `decode graph, bucket ${bucket} (${fused ? 'fused' : 'layered'}, ${grid} attention grid)`;
      g = this.scope.acquire(what, () => this.driver.captureGraph(this.stream, () => this.enqueueStep(bucket, fused, grid), what), (x) => this.driver.graphDestroy(x));
      this.graphs.set(key, g);
    }
    return g;
  }

  /**
   * Runs one eager fused step over `rows` with decode_layers' phase clocks on; returns per layer the 12
   * phase boundaries (SM cycles of row 0) for the benchmark's breakdown.
   */
  profileStep(rows: readonly PlannedRow[]): number[][] {
    const L = this.dims.L;
    const bytes = 8 * 16 * L;
    this.profileDev = this.driver.alloc(bytes, 'phase clocks');
    const graphs = this.useGraphs;
    try {
      this.useGraphs = false;
      this.runRows(rows, false);
      this.driver.streamSync(this.stream, 'profileStep');
      const out = new BigInt64Array(16 * L);
      this.driver.dtoh(out, this.profileDev);
      return Array.from({ length: L }, (_, l) => Array.from(out.subarray(16 * l, 16 * l + 12), (v) => Number(v)));
    } finally {
      this.useGraphs = graphs;
      this.driver.free(this.profileDev);
      this.profileDev = 0n;
    }
  }

  /** The kernels of one step over `bucket` rows, in stream order (fused or layered path, short or long attention grid). */
  enqueueStep(bucket: number, fused = this.fused, grid: AttnGrid = 'short'): void {
    if (fused) {
      this.enqueueKernel('decode_layers', bucket, 0);
    } else {
      for (let l = 0; l < this.dims.L; l++) {
        this.enqueueKernel('attn_route', bucket, l, fused, grid);
        this.enqueueKernel('expert_ffn', bucket, l);
      }
    }
    this.enqueueKernel('lm_head_argmax', bucket, 0, fused);
  }

  /**
   * One kernel of the step (also used alone by the benchmark's per-kernel timing). `grid` is attn_route's:
   * 'short' launches one block per row (the pre-split launch, right for any position, one block then walks
   * them all), 'long' rows x attnSplits(bucket).
   */
  enqueueKernel(name: 'decode_layers' | 'attn_route' | 'expert_ffn' | 'lm_head_argmax', bucket: number, layer: number, fused = this.fused, grid: AttnGrid = 'short'): void {
    const m: KernelArg = { u64: this.modelDev };
    const st: KernelArg = { u64: this.stepDev };
    const w: KernelArg = { bytes: this.workBytes };
    const fn = this.fns.get(name)!;
    const d = this.driver;
    if (name === 'decode_layers') {
      d.launch(fn, name, [bucket, 1, 1], this.rowThreads, this.decodeSmem, this.stream, [m, st, w, { u64: this.profileDev }]);
    } else if (name === 'attn_route') {
      // Long grid: attn_route_split on (rows, max splits); the kernel reads each row's position and lets the
      // blocks it needs not exit. Short grid: attn_route on (rows, 1), compiled without the split path (the
      // pre-split kernel: with the split path in it, short steps ran ~1.8 us slower per launch on the H200).
      if (grid === 'long') {
        d.launch(this.fns.get('attn_route_split')!, 'attn_route_split', [bucket, this.attnSplits(bucket), 1], this.rowThreads, this.rowSmem, this.stream, [m, { i32: layer }, st, w]);
      } else {
        d.launch(fn, name, [bucket, 1, 1], this.rowThreads, this.rowSmem, this.stream, [m, { i32: layer }, st, w]);
      }
    } else if (name === 'expert_ffn') {
      d.launch(fn, name, [this.dims.K, bucket, 1], FFN_THREADS, expertFfnSmemBytes(this.dims), this.stream, [m, { i32: layer }, st, w]);
    } else {
      const blocks = Math.ceil(this.dims.V / LM_ROWS_PER_BLOCK);
      d.launch(fn, name, [blocks, bucket, 1], LM_THREADS, lmHeadSmemBytes(this.dims, LM_ROWS_PER_BLOCK), this.stream,
        [m, st, w, { i32: fused ? 0 : 1 }, { i32: LM_ROWS_PER_BLOCK }]);
    }
  }

  private validate(chunks: readonly SequenceChunk[]): number {
    if (this.disposed) throw new ResidencyError('INTERNAL', 'cuda backend used after dispose()');
    return checkStepChunks(chunks, (seq) => this.seqs.get(seq)?.cap, this.dims.V, (cap) => `its capacity ${cap}`);
  }

  private alloc(bytes: number, what: string): bigint {
    return this.scope.acquire(what, () => this.driver.alloc(bytes, what), (p) => this.driver.free(p));
  }

  private allocPinned(bytes: number, what: string): { host: Uint8Array; hostPtr: bigint } {
    return this.scope.acquire(`pinned ${what}`, () => this.driver.allocPinned(bytes, what), (h) => this.driver.freeHost(h.hostPtr));
  }
}
