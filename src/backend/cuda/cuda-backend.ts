// The CUDA backend: one kernel per op over every SM, each expert's rows read once per step, a prefill chunk run as
// one batch (tensor-core products), decode pieces of <= 16 rows replayed as CUDA graphs keyed by (bucket, attention
// splits). This file plans memory, uploads, allocates, keeps the sequences and runs pieces; which kernels a piece
// launches, in order, is step/step-kernels.ts. Weights stay as stored (bf16, block FP8 with its scales, or MXFP4
// experts: weights/device-weights.ts), streamed from the shards; activations and the KV cache are fp32 (the CPU
// spec's numbers within the vs-CPU bar). Memory is planned from --gpu-memory-utilization and --max-model-len before
// anything is allocated.
import { ResidencyError } from '../../errors.ts';
import { FED_TOKEN, type Backend, type PendingStep, type SequenceChunk, type StepInput, type StepOutput } from '../backend.ts';
import { argmaxOfRow } from './step/argmax-keys.ts';
import { logitsOut } from '../logits-out.ts';
import { withFedTokens } from '../fed-tokens.ts';
import { moeLayerCount, type ModelSpec } from '../../model/spec.ts';
import type { TensorSource } from '../../model/tensor-source.ts';
import { placementRows, type BankPlacement } from '../slot-tables.ts';
import { CudaExpertBanks } from './banks/banks.ts';
import { DEFAULT_SPARE_ROWS } from '../move-pipeline.ts';
import { deviceWeightBytes, expertRowLayout, type ExpertRowLayout, type WeightFormat } from './weights/device-weights.ts';
import { uploadResidentWeights } from './weights/resident-weights.ts';
import type { CudaDriver } from './driver/driver.ts';
import { loadKernelModules } from './driver/kernels.ts';
import { ResourceScope, type ReleaseFailureSink } from './driver/resource-scope.ts';
import { TensorUploader, type UploadProgress } from './weights/uploader.ts';
import { routeModeOf, stepLayout } from './step/kernel-args.ts';
import { hotExpertsThatFit, planMemory, type MemoryPlan } from './memory/memory.ts';
import { DECODE_MAX_ROWS, DEFAULT_BUCKETS, attendSplits, bucketFor, planPieces, type OpPiece } from './step/plan.ts';
import type { KvCacheDtype, KvPool } from '../backend.ts';
import { kvDtypeCode } from '../kv-dtype.ts';
import { DEFAULT_BLOCK_SIZE } from '../kv-block.ts';
import { blocksFor, type PoolSize } from './memory/memory.ts';
import { checkCudaSupport } from './support.ts';
import { padExpertsForKernels } from './weights/pad-experts.ts';
import { resolveTuning, type KernelTuning } from './tuning.ts';
import { ARGMAX_BLOCKS, MAX_OUT, memoryNeeds, workspaceLayout } from './memory/workspace.ts';
import { checkStepChunks } from './step/step-chunks.ts';
import { OpStepKernels, raiseSharedMemoryLimits, type RecordedLaunch } from './step/step-kernels.ts';
import { scatterRouting } from './step/routing-record.ts';
import { HostExpertLane, hostLaneRefusal, hostThreadsNote, MAILBOX, type HostExpertsOptions } from './host-lane/lane.ts';
import { laneRow } from './host-lane/lane-row.ts';
import { checkParts, fixedTakes } from './host-lane/split.ts';

export interface CudaBackendOptions {
  readonly placement?: BankPlacement;
  /** Decode graph buckets (ascending, each 1, 2, 4, 8 or 16 rows). */
  readonly buckets?: readonly number[];
  readonly kernelDir?: string;
  readonly onReleaseFailure?: ReleaseFailureSink;
  readonly onProgress?: UploadProgress;
  /** Positions a sequence may hold (default: the model's max_position_embeddings). */
  readonly maxModelLen?: number;
  /** The running batch the KV pool should hold at --max-model-len at least (the default pool: min(4, this) x maxModelLen). */
  readonly maxNumSeqs?: number;
  /**
   * The paged KV pool: positions a block holds (default 16), how keys and values are stored (default bfloat16), and its
   * size, fixed as positions or bytes (the hot bank then takes the rest); absent, it takes what the bank leaves.
   */
  readonly kvCache?: { readonly blockSize?: number; readonly dtype?: KvCacheDtype; readonly tokens?: number; readonly bytes?: number };
  /** Share of the device's memory this backend may use (default 0.9). */
  readonly gpuMemoryUtilization?: number;
  /** Rows of one piece at most (prefill chunk; default 2048). */
  readonly maxPieceRows?: number;
  /** Most splits of one decode row's positions (default 32). */
  readonly maxSplits?: number;
  /** Spare hot rows per layer that background moves land in (see banks.ts). */
  readonly spareRows?: number;
  /** Row copies queued at once for moves (see banks.ts). */
  readonly copiesInFlight?: number;
  /** Kernel choices that change speed, never results (tuning.ts; the benchmarks' A/B switches). */
  readonly tuning?: Partial<KernelTuning>;
  /**
   * The host expert lane: host threads compute a share of each layer's cold experts at decode steps of at most 32
   * picks (rows x top-k), from the cold bank in host DRAM, beside the GPU (host-lane/; bf16, block-FP8 or MXFP4
   * experts). Off by default.
   */
  readonly hostExperts?: HostExpertsOptions;
}

/** One of the two pinned sets a decode piece's rows go in and its argmax keys come back in, and its completion event. */
interface DecodeIo {
  readonly rows: { host: Uint8Array; hostPtr: bigint };
  /** Mapped: op_argmax_rows writes a decode step's keys here itself (dev: the device's address of it), no copy back. */
  readonly keys: { host: Uint8Array; hostPtr: bigint; dev: bigint };
  readonly done: bigint;
  readonly slot: number;
}

const FORMAT_NAMES: Record<WeightFormat, string> = { bf16: 'bf16', fp8: 'block FP8', mxfp4: 'MXFP4' };
const gib = (b: number): string => `${(b / 2 ** 30).toFixed(1)} GiB`;

export class CudaBackend implements Backend {
  readonly name = 'cuda';
  readonly banks: CudaExpertBanks;
  readonly stream: bigint;
  readonly memory: MemoryPlan;
  /** How many experts per layer are hot, and why (serve prints it at start). */
  readonly hotReason: string;
  readonly buckets: readonly number[];
  useGraphs: boolean;
  private readonly scope: ResourceScope;
  private readonly counterDev: bigint;
  private readonly b: Record<string, bigint> = {};
  private readonly stepDev: bigint;
  private readonly stepHost: { host: Uint8Array; hostPtr: bigint };
  private readonly outHost: { host: Uint8Array; hostPtr: bigint };
  /**
   * Decode pieces' pinned rows and argmax keys, two sets used in turn (with an event each), so a piece can be
   * written and launched while the one before still runs (submit: run-ahead decoding).
   */
  private readonly decodeIo: DecodeIo[];
  private ioNext = 0;
  /** Each sequence's row in the step just before when that was one argmax decode piece, and that piece's io set: where FED_TOKEN comes from. */
  private fedFrom: { rows: Map<number, number>; io: DecodeIo } | null = null;
  private readonly maxRows: number;
  private readonly maxSplits: number;
  /** The paged KV pool (the engine's blocks), and one more block past it that padding rows write into. */
  readonly kvCache: KvPool;
  private readonly kvPoolDev: bigint;
  private readonly scratchBlock: number;
  /** Blocks a row's table holds at most: --max-model-len's. */
  private readonly maxBlocks: number;
  /** Each sequence's block table as the last step that held it gave it (profilePiece replays pieces of those). */
  private tables = new Map<number, readonly number[]>();
  /** The KV pool's size and why (serve prints it at start). */
  readonly kvReason: string;
  private readonly graphs = new Map<string, bigint>();
  private readonly d: CudaDriver;
  private disposed = false;
  readonly QKV: number;
  /** The experts' bank row as stored (bf16, or block FP8 values and scale grids). */
  readonly rowLayout: ExpertRowLayout;
  /** The spec the kernels compute on: the model's, with its experts padded where they are narrower than the kernels' K slice. */
  private readonly kernelSpec: ModelSpec;
  readonly tuning: KernelTuning;
  /** Host threads computing cold experts at decode steps (CudaBackendOptions.hostExperts). */
  readonly hostLane?: HostExpertLane;
  /** The kernels of a piece, in stream order (step-kernels.ts). */
  private readonly kernels: OpStepKernels;

  constructor(driver: CudaDriver, readonly spec: ModelSpec, stored: TensorSource, opts: CudaBackendOptions = {}) {
    const d = driver;
    this.d = d;
    checkCudaSupport(spec);
    const { spec: s, source } = padExpertsForKernels(spec, stored);
    this.kernelSpec = s;
    this.buckets = opts.buckets ?? DEFAULT_BUCKETS;
    if (this.buckets.some((b) => !Number.isInteger(b) || b < 1 || b > DECODE_MAX_ROWS || ![1, 2, 4, 8, 16].includes(b))) {
      throw new ResidencyError('BAD_ARGUMENT', `buckets [${this.buckets.join(', ')}]: each must be one of 1, 2, 4, 8, 16`);
    }
    const tuning = resolveTuning(opts.tuning);
    this.tuning = tuning;
    this.useGraphs = tuning.graphs;
    this.maxRows = opts.maxPieceRows ?? 2048;
    if (!Number.isInteger(this.maxRows) || this.maxRows < DECODE_MAX_ROWS || this.maxRows % 2 !== 0) {
      throw new ResidencyError('BAD_ARGUMENT', `maxPieceRows ${this.maxRows}: expected an even integer >= ${DECODE_MAX_ROWS}`);
    }
    this.maxSplits = opts.maxSplits ?? 32;
    const maxModelLen = opts.maxModelLen ?? s.maxPositions;
    const maxNumSeqs = opts.maxNumSeqs ?? 8;
    const blockSize = opts.kvCache?.blockSize ?? DEFAULT_BLOCK_SIZE;
    const kvDtype = opts.kvCache?.dtype ?? 'bfloat16';
    if (!Number.isInteger(blockSize) || blockSize < 1 || blockSize > 1024) throw new ResidencyError('BAD_ARGUMENT', `--block-size ${blockSize}: expected an integer in 1..1024`);
    this.maxBlocks = Math.ceil(maxModelLen / blockSize);
    if (!Number.isInteger(maxModelLen) || maxModelLen < 1 || maxModelLen > s.maxPositions) {
      throw new ResidencyError('BAD_ARGUMENT', `--max-model-len ${maxModelLen}: expected an integer in [1, ${s.maxPositions}] (the model's max_position_embeddings)`);
    }
    if (!Number.isInteger(maxNumSeqs) || maxNumSeqs < 1) throw new ResidencyError('BAD_ARGUMENT', `max running sequences ${maxNumSeqs}: expected an integer >= 1`);
    const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd, numExperts: E, topK: K, vocabSize: V, numLayers: L } = s;
    const QD = nh * hd, KD = nkv * hd;
    this.QKV = QD + 2 * KD;
    const routeMode = routeModeOf(s);
    const Lm = moeLayerCount(s);
    const T = this.maxRows;

    // The plan first: nothing is allocated for a model that cannot fit. Without a placement the hot bank is
    // sized from the budget: every expert if they fit, else as many per layer as fit (the rest stay in host memory).
    const allocatedRows = (h: number): number => h + (h < E ? (opts.spareRows ?? DEFAULT_SPARE_ROWS) : 0);
    const weightBytes = deviceWeightBytes(source, s);
    this.rowLayout = expertRowLayout(source, s);
    const refusal = opts.hostExperts ? hostLaneRefusal(s, this.rowLayout) : null;
    if (refusal) throw new ResidencyError('BAD_ARGUMENT', `--host-experts: this model's experts cannot go to the host lane: ${refusal}`);
    if (opts.hostExperts?.share !== undefined) fixedTakes(opts.hostExperts.share, MAILBOX.maxPicks); // refused before anything is allocated
    if (opts.hostExperts?.parts !== undefined) checkParts(opts.hostExperts.parts);
    const kvShape = { blockSize, dtype: kvDtype, maxBlocks: this.maxBlocks };
    const needsAt = (h: number) => memoryNeeds(s, allocatedRows(h), T, this.maxSplits, weightBytes, kvShape);
    const perBlock = needsAt(0).bytesPerBlock;
    const fixedPool = opts.kvCache?.tokens !== undefined ? blocksFor(opts.kvCache.tokens, blockSize)
      : opts.kvCache?.bytes !== undefined ? Math.floor(opts.kvCache.bytes / perBlock) : undefined;
    if (fixedPool !== undefined && fixedPool < 1) throw new ResidencyError('BAD_ARGUMENT', `--kv-cache-memory ${opts.kvCache?.bytes}: holds no KV block (${perBlock} bytes a block of ${blockSize} positions)`);
    // The pool's least: one sequence at --max-model-len whatever is asked (a request that fits the model must fit).
    if (fixedPool !== undefined && fixedPool < this.maxBlocks) {
      throw new ResidencyError('BAD_ARGUMENT', `the KV cache asked for (${fixedPool * blockSize} positions) holds less than one sequence at --max-model-len ${maxModelLen}: give more, or a smaller --max-model-len`);
    }
    const pool: PoolSize = fixedPool !== undefined ? { blocks: fixedPool } : { minBlocks: blocksFor(maxModelLen * Math.min(4, maxNumSeqs), blockSize) };
    const total = d.memInfo().total;
    const util = opts.gpuMemoryUtilization ?? 0.9;
    let placement = opts.placement;
    let anyCold: boolean;
    if (placement === undefined) {
      const fit = hotExpertsThatFit(E, needsAt, total, util, maxModelLen, pool);
      this.memory = fit.plan;
      if (fit.hot < E) placement = { hotPerLayer: fit.hot };
      anyCold = fit.hot < E;
      this.hotReason = fit.hot < E
        ? `${fit.hot} of ${E} experts per layer hot: as many as fit the ${gib(fit.plan.budget)} budget (--gpu-memory-utilization ${util}) beside the other weights, the workspace and ${fixedPool !== undefined ? 'the KV cache asked for' : `a KV cache of at least --max-model-len ${maxModelLen} x ${Math.min(4, maxNumSeqs)} sequences`}; the rest are read in place from host memory`
        : `all ${E} experts per layer hot: they fit the ${gib(fit.plan.budget)} budget (--gpu-memory-utilization ${util})`;
    } else {
      const hot = placementRows(s, placement)[0]!.hot.length;
      anyCold = hot < E;
      this.memory = planMemory(needsAt(hot), total, util, maxModelLen, pool);
      this.hotReason = `${hot} of ${E} experts per layer hot: ${'layers_map' in placement ? 'the map given' : 'the hot count given'}`;
    }
    this.hotReason += ` (an expert: ${(this.rowLayout.bytes / 2 ** 20).toFixed(2)} MiB, ${FORMAT_NAMES[this.rowLayout.format]} as stored)`;
    if (anyCold && !opts.hostExperts && hostLaneRefusal(s, this.rowLayout) === null) {
      this.hotReason += '; --host-experts auto would compute a share of the cold experts on this host\'s CPUs beside the GPU';
    }
    const kvBlocks = this.memory.kvBlocks;
    this.kvCache = { blockSize, numBlocks: kvBlocks, dtype: kvDtype, bytesPerBlock: perBlock };
    this.scratchBlock = kvBlocks;
    this.kvReason = `${(kvBlocks * blockSize).toLocaleString('en-US')} positions (${gib(this.memory.kv)}, ${kvDtype}; ${(kvBlocks * blockSize / maxModelLen).toFixed(1)} sequences at --max-model-len ${maxModelLen}): ${fixedPool !== undefined ? 'the size asked for; the hot bank takes the rest' : `what the weights, the hot bank and the workspace leave of the ${gib(this.memory.budget)} budget`}`;

    const scope = new ResourceScope('cuda op backend', opts.onReleaseFailure);
    this.scope = scope;
    try {
      const fns = loadKernelModules(d, scope, opts.kernelDir).fns;
      this.stream = scope.acquire('stream', () => d.streamCreate(), (st) => d.streamDestroy(st));
      const uploader = scope.adopt(new TensorUploader(d, source, { bf16: fns.get('op_check_finite_bf16')!, fp8: fns.get('op_check_finite_fp8')! }, opts.onProgress ? { onProgress: opts.onProgress } : {}), 'tensor uploader', (u) => u.abandon());
      this.banks = scope.adopt(new CudaExpertBanks(d, s, uploader, this.rowLayout, this.stream, {
        ...(placement ? { placement } : {}), ...(opts.spareRows !== undefined ? { spareRows: opts.spareRows } : {}),
        ...(opts.copiesInFlight !== undefined ? { copiesInFlight: opts.copiesInFlight } : {}), ...(opts.onReleaseFailure ? { onReleaseFailure: opts.onReleaseFailure } : {}),
      }), 'expert banks', (b) => b.dispose());
      const w = uploadResidentWeights(d, s, source, uploader, (bytes, what) => this.alloc(bytes, what));
      this.counterDev = this.alloc(4 * Lm * E, 'counter table');
      d.memsetD8(this.counterDev, 0, 4 * Lm * E);

      // Workspace of one piece (T rows); zeroed so padding rows never read uninitialized memory.
      const buf = (name: string, bytes: number): void => {
        this.b[name] = this.alloc(bytes, name);
        d.memsetD8(this.b[name]!, 0, bytes);
      };
      for (const [name, bytes] of workspaceLayout(s, T, this.maxSplits)) buf(name, bytes);
      // The paged KV pool, and the scratch block padding rows write into (never read by a real row).
      this.kvPoolDev = this.alloc(perBlock * (kvBlocks + 1), `KV cache (${kvBlocks} blocks of ${blockSize} positions, ${kvDtype})`);
      const stepBytes = stepLayout(T, this.maxBlocks).bytes;
      this.stepDev = this.alloc(stepBytes, 'step rows');
      this.stepHost = scope.acquire('pinned step rows', () => d.allocPinned(stepBytes, 'step rows'), (h) => d.freeHost(h.hostPtr));
      this.outHost = scope.acquire('pinned outputs', () => d.allocPinned(Math.max(4 * MAX_OUT * V, 8 * MAX_OUT * ARGMAX_BLOCKS, 8 * T * Lm * K), 'outputs'), (h) => d.freeHost(h.hostPtr));
      this.decodeIo = [0, 1].map((i) => ({
        rows: scope.acquire(`pinned decode rows ${i}`, () => d.allocPinned(stepLayout(DECODE_MAX_ROWS, this.maxBlocks).bytes, 'decode rows'), (h) => d.freeHost(h.hostPtr)),
        keys: scope.acquire(`mapped argmax keys ${i}`, () => d.allocMappedHost(8 * MAX_OUT * ARGMAX_BLOCKS, 'argmax keys'), (h) => d.freeHost(h.hostPtr)),
        done: scope.acquire(`decode event ${i}`, () => d.eventCreate(), (e) => d.eventDestroy(e)),
        slot: i,
      }));
      if (opts.hostExperts) {
        this.hostLane = this.startHostLane(opts.hostExperts, scope);
        this.hotReason += this.hostLane
          ? `; host expert lane: ${this.hostLane.threads} threads (${this.hostLane.simd ? 'AVX-512' : 'reference loop'}) compute ${opts.hostExperts.share !== undefined ? `${+(opts.hostExperts.share * 100).toFixed(1)}%` : 'a share chosen from the layers\' measured times'} of each layer's cold experts${this.hostLane.parts > 1 ? ` (in ${this.hostLane.parts} parts an expert: one a layer may be split with the GPU)` : ''} at decode steps of up to ${Math.max(0, ...this.buckets.filter((b) => b * spec.topK <= MAILBOX.maxPicks && this.gemvFor(true, b)))} rows`
          : '; host expert lane: off (no expert is cold)';
        const note = this.hostLane ? hostThreadsNote(this.hostLane.threads) : null;
        if (note) this.hotReason += ` (${note})`;
      }
      raiseSharedMemoryLimits(d, fns, s, routeMode);
      this.kernels = new OpStepKernels({
        d, spec: s, stream: this.stream, fns, layers: w.layers, embed: w.embed, lmHead: w.lmHead, finalNorm: w.finalNorm, invFreq: w.invFreq,
        ropeScale: w.ropeScale, counterDev: this.counterDev, buffers: this.b, stepDev: this.stepDev, banks: this.banks, rowLayout: this.rowLayout,
        kv: { pool: this.kvPoolDev, blockSize, dtype: kvDtypeCode(kvDtype), maxBlocks: this.maxBlocks },
        routeMode, QKV: this.QKV, pdl: tuning.pdl, earlyWeights: tuning.earlyWeights, evictFirst: tuning.evictFirst,
        fuseResidual: tuning.fuseResidual, ...(tuning.combineRows ? { combineRows: tuning.combineRows } : {}),
        oneWaveDense: tuning.oneWaveDense, ...(this.hostLane ? { hostLane: { mailboxDev: this.hostLane.mailboxDev, stateDev: this.hostLane.stateDev, parts: this.hostLane.parts } } : {}),
      });
      uploader.finish(); // every weight landed and is finite, before the first step
    } catch (e) {
      throw scope.unwind(e);
    }
  }

  /** The host expert lane over the banks' cold rows (none when every expert is hot); released before the banks. */
  private startHostLane(he: HostExpertsOptions, scope: ResourceScope): HostExpertLane | undefined {
    const { hiddenSize: H, expertIntermediate: I, numExperts: E } = this.kernelSpec;
    const b = this.banks;
    if (b.hotPerLayer >= E) return undefined;
    const banks = { hiddenSize: H, intermediate: I, layers: b.layers, hotRows: b.hotRowsAllocated, coldRows: E - b.hotPerLayer, rowBytes: b.rowBytes, at: laneRow(this.rowLayout, this.kernelSpec), coldHost: b.coldHostAddresses() };
    const lane = scope.adopt(new HostExpertLane(he.lib, this.d, banks, he), 'host expert lane', (l) => l.dispose());
    // Without its vector path the lane sums a value at a time (the reference loop): far slower than the bus it relieves.
    if (!lane.simd && he.simd !== false) {
      throw new ResidencyError('BAD_ARGUMENT', `--host-experts: this host cannot run the lane's vector path (it needs AVX-512${this.rowLayout.format === 'mxfp4' ? '' : `, and hidden ${H} and expert size ${I} multiples of 256`}); without --host-experts the GPU reads every cold expert in place`);
    }
    return lane;
  }

  /** Copies every layer's keys and values of block src into block dst, pair by pair, on the stream (copy-on-write). */
  copyBlocks(pairs: readonly (readonly [src: number, dst: number])[]): void {
    if (this.disposed) throw new ResidencyError('INTERNAL', 'cuda backend used after dispose()');
    const n = this.kvCache.numBlocks, bytes = this.kvCache.bytesPerBlock;
    for (const [src, dst] of pairs) {
      for (const b of [src, dst]) if (!Number.isInteger(b) || b < 0 || b >= n) throw new ResidencyError('BAD_ARGUMENT', `copyBlocks: block ${b} is not in [0, ${n})`);
    }
    for (const [src, dst] of pairs) this.d.copyAsync(this.kvPoolDev + BigInt(dst * bytes), this.kvPoolDev + BigInt(src * bytes), bytes, this.stream);
  }

  forward(input: StepInput): StepOutput {
    return this.run(input).wait();
  }

  /**
   * forward() that returns before the step completes when it is one decode piece asking for the argmax only
   * (run-ahead decoding: the engine submits the next step, its tokens fed on the device, while this one runs);
   * any other step runs to completion here.
   */
  submit(input: StepInput): PendingStep {
    return this.run(input);
  }

  private run(input: StepInput): PendingStep {
    const { vocabSize: V, topK: K } = this.spec;
    const L = moeLayerCount(this.spec); // routing is recorded for the MoE layers
    // Fed tokens come from the step just before (if it was one argmax decode piece); this step forgets them.
    const fed = this.fedFrom;
    this.fedFrom = null;
    const T = this.validate(input.chunks, fed?.rows ?? null);
    this.tables = new Map(input.chunks.map((c) => [c.seq, c.blockTable!]));
    this.hostLane?.tune(this.stream); // now and then: the split from the layers' measured times, queued before this step
    let fedFrom = fed?.rows ?? null;
    let pieces = planPieces(input.chunks, this.maxRows, MAX_OUT);
    if (fed && pieces.length > 1 && input.chunks.some((c) => c.tokens[0] === FED_TOKEN)) {
      // Several pieces: an earlier one's argmax would overwrite the keys a later one feeds from, so the fed tokens
      // are read back here (the step before has to complete first) and given as tokens.
      this.d.eventSync(fed.io.done);
      pieces = planPieces(withFedTokens(input.chunks, (seq) => argmaxOfRow(fed.io.keys.host, fed.rows.get(seq)!, ARGMAX_BLOCKS)), this.maxRows, MAX_OUT);
      fedFrom = null;
    }
    const record = input.recordRouting === true;
    // argmaxOnly: each out row's argmax keys come back (op_argmax_rows), not its logits.
    const argmax = input.argmaxOnly === true ? new Int32Array(input.chunks.length) : undefined;
    const logits = argmax ? new Float32Array(0) : logitsOut(input, V);
    const routing = record ? new Int32Array(T * L * K) : undefined;
    const routingWeights = record ? new Float32Array(T * L * K) : undefined;
    const keysOf = (piece: OpPiece, rowsRun: boolean, host: Uint8Array): void => {
      piece.outs.forEach((o, i) => { argmax![o.chunk] = argmaxOfRow(host, rowsRun ? o.row : i, ARGMAX_BLOCKS); });
    };
    const only = pieces.length === 1 ? pieces[0]! : undefined;
    if (argmax && only && !record && this.isDecode(only)) {
      // One argmax decode piece: its sequences' rows (a sequence's last: its output's) are where the next step's fed tokens come from.
      const { io } = this.runPiece(only, input.count, true, fedFrom);
      this.fedFrom = { rows: new Map(only.rows.map((r, i) => [r.seq, i])), io: io! };
      this.d.eventRecord(io!.done, this.stream);
      const finish = (): StepOutput => {
        if (this.disposed) throw new ResidencyError('INTERNAL', 'cuda backend: a submitted step waited for after dispose()');
        this.d.eventSync(io!.done);
        this.hostLane?.check();
        keysOf(only, true, io!.keys.host);
        return { logits, argmax };
      };
      return { wait: finish };
    }
    for (const piece of pieces) {
      const { rowsRun, outRows, io } = this.runPiece(piece, input.count, argmax !== undefined, fedFrom);
      const n = piece.rows.length;
      const oh = this.outHost;
      this.d.streamSync(this.stream, 'forward');
      this.hostLane?.check();
      // Decode pieces compute every row's logits (out row = row); prefill pieces only their outputs, in order.
      if (argmax) {
        keysOf(piece, rowsRun, io ? io.keys.host : oh.host);
      } else {
        const lh = new Float32Array(oh.host.buffer, oh.host.byteOffset, outRows * V);
        piece.outs.forEach((o, i) => logits.set(lh.subarray((rowsRun ? o.row : i) * V, ((rowsRun ? o.row : i) + 1) * V), o.chunk * V));
      }
      if (routing && routingWeights) {
        const LK = L * K;
        this.d.dtohAsync(oh.hostPtr, this.b['pickE']!, 4 * n * LK, this.stream);
        this.d.dtohAsync(oh.hostPtr + BigInt(4 * n * LK), this.b['pickW']!, 4 * n * LK, this.stream);
        this.d.streamSync(this.stream, 'forward routing');
        scatterRouting(oh.host, piece.rows, LK, routing, routingWeights);
      }
    }
    const out: StepOutput = argmax ? { logits, argmax } : { logits };
    const result = record ? { ...out, routing, routingWeights } : out;
    return { wait: () => result };
  }

  readCounter(): Uint32Array {
    const out = new Uint32Array(moeLayerCount(this.spec) * this.spec.numExperts);
    this.d.streamSync(this.stream, 'readCounter');
    this.d.dtoh(out, this.counterDev);
    return out;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.scope.defer('wait for the stream', () => this.d.streamSync(this.stream, 'dispose'));
    this.scope.close();
    this.graphs.clear();
  }

  /** The keys of the decode graphs captured so far (`${bucket}/${splits}/${fused|unfused attention}[/argmax]/io${0|1}`: one a pinned io set). */
  graphKeys(): string[] {
    return [...this.graphs.keys()];
  }

  /**
   * Uploads one piece's rows and runs it. Decode pieces (<= 16 rows) are padded to a bucket and every padded
   * row computes logits (rowsRun: out row = row); prefill pieces run their rows as they are and compute logits
   * for their outputs only. Returns the rows whose logits sit in the logits buffer.
   */
  runPiece(piece: OpPiece, count: boolean, argmax = false, fedFrom: ReadonlyMap<number, number> | null = null): { rowsRun: boolean; outRows: number; io?: DecodeIo } {
    const decode = this.isDecode(piece);
    const { T, S, fused } = this.shapeOf(piece);
    const outs = decode ? T : piece.outs.length;
    const outRows = decode ? T : Math.max(1, outs);
    // Decode pieces take the two pinned row and key sets in turn (the one before may still be running).
    const io = decode ? this.decodeIo[this.ioNext] : undefined;
    if (io) this.ioNext ^= 1;
    const rowsHost = io ? io.rows : this.stepHost;
    this.writeRows(rowsHost.host, piece, T, count, decode, fedFrom, this.tables);
    if (decode && this.useGraphs) {
      // The graph holds the copies too: rows in, logits out (one submission a decode step).
      this.d.graphLaunch(this.graphFor(T, S, fused, argmax, io!), this.stream);
    } else {
      this.d.htodAsync(this.stepDev, rowsHost.hostPtr, stepLayout(T, this.maxBlocks).bytes, this.stream);
      this.kernels.enqueue(T, this.gemvFor(decode, T), S, outRows, fused);
      if (piece.outs.length > 0) this.copyOut(outRows, argmax, io);
    }
    return io ? { rowsRun: decode, outRows, io } : { rowsRun: decode, outRows };
  }

  /** A piece's rows as run (decode pieces padded to a bucket), its attention splits, and whether its attention is the fused decode kind. */
  private shapeOf(piece: OpPiece): { T: number; S: number; fused: boolean } {
    const n = piece.rows.length;
    const decode = this.isDecode(piece);
    const T = decode ? bucketFor(n, this.buckets) : n;
    const maxPos = Math.max(...piece.rows.map((r) => r.pos));
    // Latent attention (mla.cuh) runs a row's positions in one block per 8 heads: no splits.
    const S = this.spec.mla ? 1 : attendSplits(T, maxPos, this.maxSplits, this.spec.numKvHeads, this.tuning.attendMinBlocks);
    // The fused decode attention writes a row's k/v in the same launch that reads the cache: right only when
    // no row reads another's position, i.e. every row is a different sequence (not a short prefill chunk).
    const fused = decode && new Set(piece.rows.map((r) => r.seq)).size === n;
    return { T, S, fused };
  }

  /** A piece run as decode (padded to a bucket, gemv products, a graph) rather than as a prefill chunk. */
  private isDecode(piece: OpPiece): boolean {
    const n = piece.rows.length;
    return n <= DECODE_MAX_ROWS && n <= this.buckets[this.buckets.length - 1]!;
  }

  /** Whether a piece of T rows takes the gemv products (decode pieces below tensorCoreDecodeRows) or the tensor-core tiles. */
  private gemvFor(decode: boolean, T: number): boolean {
    const tc = this.tuning.tensorCoreDecodeRows;
    return decode && (tc === 0 || T < tc);
  }

  /** The out rows' logits, or with `argmax` their argmax keys, into the pinned outputs (a decode piece's keys into its io set). */
  private copyOut(rows: number, argmax: boolean, io?: DecodeIo): void {
    if (!argmax) {
      this.d.dtohAsync(this.outHost.hostPtr, this.b['logits']!, 4 * rows * this.spec.vocabSize, this.stream);
      return;
    }
    // A decode piece's keys go straight to its mapped io set; a prefill piece's are copied into the pinned outputs.
    this.kernels.enqueueArgmax(rows, io ? io.keys.dev : 0n);
    if (!io) this.d.dtohAsync(this.outHost.hostPtr, this.b['argmaxKeys']!, 8 * rows * ARGMAX_BLOCKS, this.stream);
  }

  private graphFor(T: number, S: number, fused: boolean, argmax: boolean, io: DecodeIo): bigint {
    const key = `${T}/${S}/${fused ? 'fused' : 'unfused'}${argmax ? '/argmax' : ''}/io${io.slot}`;
    let g = this.graphs.get(key);
    if (g === undefined) {
      const what = `op decode graph, bucket ${T}, ${S} attention split(s), ${fused ? 'fused' : 'unfused'} attention${argmax ? ', argmax out' : ''}, io set ${io.slot}`;
      const body = (): void => {
        this.d.htodAsync(this.stepDev, io.rows.hostPtr, stepLayout(T, this.maxBlocks).bytes, this.stream);
        this.kernels.enqueue(T, this.gemvFor(true, T), S, T, fused);
        this.copyOut(T, argmax, io);
      };
      g = this.scope.acquire(what, () => this.d.captureGraph(this.stream, body, what), (x) => this.d.graphDestroy(x));
      this.graphs.set(key, g);
    }
    return g;
  }

  /**
   * Step rows into pinned memory (the caller copies the stepLayout(T) bytes a piece of T rows uses). A fed
   * token (FED_TOKEN) is written as -1 - its sequence's row in the step just before: layer 0's residual+norm
   * takes that row's argmax keys, still on the device, for the token.
   */
  private writeRows(host: Uint8Array, piece: OpPiece, T: number, count: boolean, decode: boolean, fedFrom: ReadonlyMap<number, number> | null,
    tables: ReadonlyMap<number, readonly number[]>): void {
    const h = Buffer.from(host.buffer, host.byteOffset, host.byteLength);
    const o = stepLayout(T, this.maxBlocks);
    h.writeInt32LE(piece.rows.length, 0);
    h.writeInt32LE(count ? 1 : 0, 4);
    // One block table a sequence of the piece (the entries its rows read), and the scratch one padding rows take.
    const tableAt = (slot: number): number => o.tables + 4 * this.maxBlocks * slot;
    const scratch = o.tableSlots - 1;
    h.writeInt32LE(this.scratchBlock, tableAt(scratch));
    const slotOf = new Map<number, number>();
    for (let i = 0; i < T; i++) {
      const r = piece.rows[i];
      h.writeInt32LE(!r ? 0 : r.token === FED_TOKEN ? -1 - fedFrom!.get(r.seq)! : r.token, o.token + 4 * i);
      h.writeInt32LE(r ? r.pos : 0, o.pos + 4 * i);
      let slot = scratch;
      if (r) {
        slot = slotOf.get(r.seq) ?? slotOf.size;
        if (!slotOf.has(r.seq)) {
          if (slot >= scratch) throw new ResidencyError('INTERNAL', `a piece of ${T} rows holds more than ${scratch} sequences`);
          slotOf.set(r.seq, slot);
          const t = tables.get(r.seq)!;
          const last = Math.max(...piece.rows.filter((x) => x.seq === r.seq).map((x) => x.pos));
          for (let j = 0; j <= Math.floor(last / this.kvCache.blockSize); j++) h.writeInt32LE(t[j]!, tableAt(slot) + 4 * j);
        }
      }
      h.writeBigUInt64LE(this.stepDev + BigInt(tableAt(slot)), o.table + 8 * i);
    }
    // Output rows (the lm head's gather), padded with the last one.
    const outs = decode ? Array.from({ length: T }, (_, i) => i) : piece.outs.map((x) => x.row);
    if (outs.length === 0) outs.push(0);
    const ob = bucketFor(outs.length, [1, 2, 4, 8, 16]);
    for (let i = 0; i < ob; i++) h.writeInt32LE(outs[Math.min(i, outs.length - 1)]!, o.out + 4 * i);
  }


  /**
   * Device time of each launch of one piece (the benchmark's per-kernel table): the piece runs once eagerly,
   * recording its launches; then each launch is replayed `repeats` times inside a captured graph (so host
   * launch latency stays out), timed with events. Also the device time of the whole piece's kernels as one graph
   * (stepUs), what each role adds to it (marginalUs: that graph less the graph without the role's launches) and, for a
   * decode piece, of its decode graph as an argmax step submits it, back to back (submittedUs: the rows copied in, the
   * kernels, the argmax writing its keys into the mapped io set).
   * Leaves the work buffers (and the KV cache at these positions) overwritten: use last.
   */
  profilePiece(piece: OpPiece, repeats = 20): { launches: { name: string; role: string; us: number }[]; stepUs: number; marginalUs: Record<string, number>; submittedUs?: number } {
    const graphs = this.useGraphs;
    const rec: RecordedLaunch[] = [];
    this.useGraphs = false;
    this.kernels.recording = rec;
    const d = this.d;
    const [e0, e1] = [d.eventCreate(), d.eventCreate()];
    try {
      this.fedFrom = null;
      this.runPiece(piece, false);
      this.kernels.recording = null;
      d.streamSync(this.stream, 'profilePiece');
      // A graph launched once to warm, then `times` times back to back between two events: us a launch.
      const timeGraph = (g: bigint, times: number): number => {
        try {
          d.graphLaunch(g, this.stream);
          d.eventRecord(e0, this.stream);
          for (let i = 0; i < times; i++) d.graphLaunch(g, this.stream);
          d.eventRecord(e1, this.stream);
          return (1000 * d.eventElapsed(e0, e1)) / times;
        } finally {
          d.streamSync(this.stream, 'profile graph');
        }
      };
      const time = (body: () => void, times: number): number => {
        const g = d.captureGraph(this.stream, body, 'profile graph');
        try {
          return timeGraph(g, times);
        } finally {
          d.graphDestroy(g);
        }
      };
      const launches = rec.map((r) => ({ name: r.name, role: r.role, us: time(() => { for (let i = 0; i < repeats; i++) r.run(); }, 3) / repeats }));
      const stepUs = time(() => { for (const r of rec) r.run(); }, 10);
      // What each role adds to the graph: the step's graph less the same graph without that role's launches (the kernels
      // after read what the step before left, so they do the same work; only the time means anything).
      const marginalUs = Object.fromEntries([...new Set(rec.map((r) => r.role))].map((role) => [role, stepUs - time(() => { for (const r of rec) if (r.role !== role) r.run(); }, 10)]));
      if (!this.isDecode(piece) || !graphs) return { launches, stepUs, marginalUs };
      const { T, S, fused } = this.shapeOf(piece);
      const io = this.decodeIo[0]!;
      this.writeRows(io.rows.host, piece, T, false, true, null, this.tables);
      return { launches, stepUs, marginalUs, submittedUs: timeGraph(this.graphFor(T, S, fused, true, io), 10) };
    } finally {
      this.kernels.recording = null;
      this.useGraphs = graphs;
      d.eventDestroy(e0);
      d.eventDestroy(e1);
    }
  }

  private validate(chunks: readonly SequenceChunk[], fedFrom: ReadonlyMap<number, number> | null): number {
    if (this.disposed) throw new ResidencyError('INTERNAL', 'cuda backend used after dispose()');
    return checkStepChunks(chunks, this.kvCache, this.maxBlocks, this.spec.vocabSize, fedFrom);
  }


  private alloc(bytes: number, what: string): bigint {
    return this.scope.acquire(what, () => this.d.alloc(bytes, what), (p) => this.d.free(p));
  }
}
