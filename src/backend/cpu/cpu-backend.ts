// The CPU backend: a forward over a batch of sequence chunks in float32 (Qwen3-MoE, and the families of
// model/families/: their attention variants in family-attention.ts, routers in routers.ts, dense and shared
// MLPs in family-mlp.ts), the reference every other backend is tested against.
import { ResidencyError } from '../../errors.ts';
import { type Backend, type StepInput, type StepOutput } from '../backend.ts';
import { kvDtypeCode, roundKvInPlace, type KvDtypeCode } from '../kv-dtype.ts';
import { HostFedTokens } from '../fed-tokens.ts';
import { logitsOut } from '../logits-out.ts';
import { withHostArgmax } from '../argmax.ts';
import { moeLayerCount, moeLayerIds, type ModelSpec } from '../../model/spec.ts';
import type { MlaWeights, ModelWeights, VocabMatrix } from '../../model/weights.ts';
import { isBf16, isQuantized, type Matrix } from '../../model/quant.ts';
import { linearQ } from './quant-linear.ts';
import { CpuExpertBanks } from './banks.ts';
import type { BankPlacement } from '../slot-tables.ts';
import { CpuKvPool, cpuBytesPerBlock, cpuKvBlocks, type CpuKvOptions } from './kv-pool.ts';
import { moeLayer, moeScratch, type MoeScratch, type MoeShape } from './moe.ts';
import { headNorm, rope, type KvPages, type QkvShape } from './attention-ops.ts';
import { attentionWindowed, mlaAttention, mlaScratch, type MlaScratch, type Project } from './family-attention.ts';
import { addBias, FamilyMlps } from './family-mlp.ts';
import { checkWeights } from './check-weights.ts';
import { addInPlace, embedding, rmsnorm } from './linalg.ts';
import { heapAlloc, sharedAlloc, type Alloc } from './alloc.ts';
import { linearBytes, placeWeights, type LayerNorms, type QkvProjs } from './placed-weights.ts';
import { serialCompute, type RowCompute } from './row-compute.ts';
import { timedCompute, type OpTimer } from './op-timer.ts';
import { CpuThreadPool } from './parallel/pool.ts';
import { resolveThreads } from './parallel/threads.ts';
import { WasmArena } from './wasm/arena.ts';
import { resolveSimd, SIMD_MAX_BYTES } from './wasm/simd-option.ts';
import { simdKernel } from './wasm/kernel.ts';
import { TabStage } from './wasm/stage.ts';
import { expertScratch } from './wasm/experts.ts';

export interface CpuBackendOptions {
  /** Initial placement of experts in the hot and cold banks (default: all hot). */
  readonly placement?: BankPlacement;
  /**
   * Keep the full router probabilities of the last step run with recordRouting (`lastRouterProbs`),
   * for near-tie diagnostics in parity tests.
   */
  readonly keepRouterProbs?: boolean;
  /**
   * Threads computing each step, the main thread included: 1 is the single-threaded reference; more
   * share the lm head, q/k/v/o, routers, attention and experts out by rows to worker threads,
   * bit-identical to 1. Default: RESIDENCY_CPU_THREADS (a count or `auto`), else 1 (parallel/threads.ts
   * says why). Call dispose() when done (an undisposed backend's workers stop when it is collected).
   */
  readonly threads?: number;
  /**
   * Run the linear layers (lm head, q/k/v/o, routers) and experts through the WebAssembly SIMD kernel
   * (wasm/), bit-identical to the JS loops. Default: RESIDENCY_CPU_SIMD (1/0), else on where the runtime
   * has WebAssembly SIMD and the weights fit its 4 GiB memory (else the JS loops).
   */
  readonly simd?: boolean;
  /**
   * The banks take the routed experts from `weights` (each entry becomes TAKEN_EXPERT once its row is in a
   * bank), so host memory holds each expert once instead of twice (loaded weights + banks). The weights then
   * serve no other backend: a second one over them is refused. Default false (tests and the API build several
   * backends over one model); the CLI and server, which load a model for one backend, set it.
   */
  readonly takeExperts?: boolean;
  /**
   * Most 4-byte words in one piece of an expert bank (banks.ts; default BANK_PIECE_WORDS, 1 GiB): a bank is
   * held in pieces of whole rows, whatever its layer's size. Never changes a result; tests lower it.
   */
  readonly bankPieceWords?: number;
  /** Times every op into this timer (op-timer.ts; bench:cpu --ops). Never changes a result. */
  readonly opTimer?: OpTimer;
  /** The paged KV cache: block size, dtype and size (kv-pool.ts; default 16 positions a block, float32, 4 x max positions within 512 MiB). */
  readonly kvCache?: CpuKvOptions;
}

/** The share of the kernel's memory weights and KV pool may fill together; the rest is scratch. Past it the pool lives outside (JS attention). */
const SIMD_WITH_POOL_BYTES = 0.85 * SIMD_MAX_BYTES;

/** Weights whose routed experts a backend has taken (takeExperts). */
const takenWeights = new WeakSet<ModelWeights>();

/** Per-step buffers for up to `tokens` tokens and `chunks` chunks; reallocated only when a step is bigger. */
interface Scratch {
  readonly tokens: number;
  readonly chunks: number;
  readonly x: Float32Array; // [T][H] residual stream (from the allocator: threads add to it)
  readonly xn: Float32Array; // [T][H] normalized
  readonly q: Float32Array; // [T][nH*d]
  readonly k: Float32Array; // [T][nKv*d]
  readonly v: Float32Array; // [T][nKv*d]
  readonly qkv: Float32Array; // [T][nH*d + 2*nKv*d] (threads only: q, k, v from the stacked projection)
  readonly attn: Float32Array; // [T][nH*d]
  readonly proj: Float32Array; // [T][H]
  readonly pos: Int32Array; // [T]
  readonly tableOf: Int32Array; // [T] where each token's block table starts in the step's tables
  readonly rowOf: Int32Array; // [T] the cache row each token's position is written to
  readonly last: Float32Array; // [C][H] final-normed last token of each chunk
  readonly logits: Float32Array; // [C][V]
  readonly moe: MoeScratch;
  readonly mla: MlaScratch | null;
}

export class CpuBackend implements Backend {
  readonly name = 'cpu';
  readonly banks: CpuExpertBanks;
  /**
   * Router choice scores [tokens][MoE layers][experts] of the last recorded step (with keepRouterProbs):
   * the probabilities (softmax routers), logits (gpt-oss) or biased group-masked scores (DeepSeek) the top-k
   * was taken over.
   */
  lastRouterProbs: Float32Array | null = null;
  /** Cold picks in the last step (a cold share probe for benchmarks and telemetry). */
  lastColdPicks = 0;
  private readonly counter: Uint32Array;
  /** The paged KV cache (the contract's kvCache): every layer's key and value rows. */
  readonly kvCache: CpuKvPool;
  private readonly kvCode: KvDtypeCode;
  /** The step's block tables, one after another (grown on demand; shared with the threads). */
  private tables: Int32Array;
  private readonly cos: Float32Array;
  private readonly sin: Float32Array;
  private readonly scores: Float64Array;
  private readonly attnAcc: Float64Array;
  private readonly moeShape: MoeShape;
  private scratch: Scratch | null = null;
  /** Each sequence's argmax of the last step, for the next step's FED_TOKEN chunks. */
  private readonly fedTokens = new HostFedTokens();
  /** Threads in use (1: the serial reference). */
  readonly threads: number;
  /** Whether the linear layers run through the wasm SIMD kernel. */
  readonly simd: boolean;
  private readonly alloc: Alloc;
  private readonly compute: RowCompute;
  // The non-expert weights where the compute reads them (placed-weights.ts says where and why).
  private readonly lmHead: VocabMatrix;
  private readonly routers: Float32Array[];
  private readonly oProjs: Matrix[];
  private readonly qkvProjs: QkvProjs[];
  private readonly qkv: (Float32Array | null)[];
  private readonly norms: LayerNorms[];
  private readonly qkvShapes: (QkvShape | null)[];
  /** Per model layer: its index among the MoE layers (banks, counter, routing), or -1 for a dense layer. */
  private readonly moeIndex: Int32Array;
  /** Dense and shared-expert MLPs (families with them). */
  private readonly mlps: FamilyMlps | null;
  private readonly mla: (MlaWeights | null)[];

  constructor(
    readonly spec: ModelSpec,
    private readonly weights: ModelWeights,
    private readonly options: CpuBackendOptions = {},
  ) {
    if (takenWeights.has(weights)) {
      throw new ResidencyError('BAD_ARGUMENT', 'these weights\' routed experts were taken by another CPU backend (takeExperts): load the model again for a second backend, or create backends without takeExperts');
    }
    checkWeights(spec, weights);
    this.threads = resolveThreads(options.threads);
    const arenaBytes = linearBytes(spec, weights);
    this.simd = resolveSimd(options.simd, arenaBytes);
    // SIMD: the linear layers' and experts' weights and activations live in one shared wasm memory
    // (wasm/arena.ts); KV caches stay where the JS path keeps them.
    // Weights this backend takes whose bf16 matrices were loaded into a kernel memory: that memory becomes the arena
    // (the matrices are computed on in place, never copied beside themselves).
    const adopt = options.takeExperts === true && weights.bf16Memory instanceof WasmArena ? weights.bf16Memory : null;
    const arena = this.simd ? (adopt ?? new WasmArena(arenaBytes)) : null;
    const plain = this.threads > 1 ? sharedAlloc : heapAlloc;
    this.alloc = arena ?? plain;
    // The KV pool in the kernel's memory when it fits beside the weights (its attention reads it in place).
    const kvOpts = options.kvCache ?? {};
    const poolBytes = cpuKvBlocks(spec, kvOpts) * cpuBytesPerBlock(spec, kvOpts.blockSize ?? 16);
    this.kvCache = new CpuKvPool(spec, arena && arenaBytes + poolBytes <= SIMD_WITH_POOL_BYTES ? arena : plain, kvOpts);
    this.kvCode = kvDtypeCode(this.kvCache.dtype);
    this.tables = this.alloc.i32(64);
    this.banks = new CpuExpertBanks(spec, weights.layers, options.placement, {
      alloc: arena ?? plain,
      take: options.takeExperts === true,
      ...(options.bankPieceWords !== undefined ? { pieceWords: options.bankPieceWords } : {}),
    });
    if (options.takeExperts) takenWeights.add(weights);
    const moeIds = moeLayerIds(spec);
    this.moeIndex = new Int32Array(spec.numLayers).fill(-1);
    moeIds.forEach((l, m) => (this.moeIndex[l] = m));
    ({ lmHead: this.lmHead, routers: this.routers, oProjs: this.oProjs, qkvProjs: this.qkvProjs, qkv: this.qkv, norms: this.norms, cos: this.cos, sin: this.sin,
      qkvShapes: this.qkvShapes, mla: this.mla } = placeWeights(spec, weights, { arena, threads: this.threads, take: options.takeExperts === true, kvDtype: this.kvCode }));
    this.mlps = spec.denseIntermediate !== undefined || spec.sharedIntermediate ? new FamilyMlps(spec, weights.layers) : null;
    // Per thread scratch in the wasm memory: expert units, attention.
    const perThread = <T>(f: (a: WasmArena) => T): T[] => (arena ? Array.from({ length: this.threads }, () => f(arena)) : []);
    const simd = arena
      ? {
          arena,
          kernel: simdKernel(arena.memory),
          stage: new TabStage(arena),
          experts: perThread((a) => expertScratch(a, spec.expertIntermediate)),
          scores: perThread((a) => a.f64(spec.maxPositions)),
          accs: perThread((a) => a.f64(spec.headDim)),
        }
      : undefined;
    const banks = this.banks;
    const quant = banks.quant ? { rows: banks.quantRows, layout: banks.quant, rowSize: banks.rowSize, hidden: spec.hiddenSize, inter: spec.expertIntermediate } : undefined;
    const compute =
      this.threads > 1
        ? new CpuThreadPool({ threads: this.threads, banks: banks.pieces, simd, ...(quant ? { quant } : {}) })
        : serialCompute(banks.pieces, spec.expertIntermediate, simd, quant);
    this.compute = options.opTimer ? timedCompute(compute, options.opTimer) : compute;
    this.counter = new Uint32Array(moeLayerCount(spec) * spec.numExperts);
    const m = spec.mla;
    this.scores = new Float64Array(spec.maxPositions);
    this.attnAcc = new Float64Array(Math.max(spec.headDim, m?.vHeadDim ?? 0));
    this.moeShape = {
      hidden: spec.hiddenSize,
      experts: spec.numExperts,
      topK: spec.topK,
      inter: spec.expertIntermediate,
      normTopkProb: spec.normTopkProb,
      ...(spec.router ? { router: spec.router } : {}),
      ...(spec.expertAct ? { clamped: spec.expertAct } : {}),
    };
  }

  copyBlocks(pairs: readonly (readonly [number, number])[]): void {
    this.kvCache.copyBlocks(pairs);
  }

  /**
   * Resolves when the worker threads have started (steps never wait for this: until then the main
   * thread computes every row). Benchmarks and tests await it so that workers take part from step one.
   */
  ready(): Promise<void> {
    return this.compute.ready();
  }

  /** Row chunks computed by worker threads so far (0 with one thread): a probe that they take part. */
  workerChunks(): number {
    return this.compute.workerChunks();
  }

  readCounter(): Uint32Array {
    return this.counter.slice();
  }

  dispose(): void {
    this.scratch = null;
    this.compute.dispose();
  }

  forward(stepInput: StepInput): StepOutput {
    this.compute.beginStep();
    try {
      return this.step(stepInput);
    } finally {
      this.compute.endStep();
    }
  }

  private step(stepInput: StepInput): StepOutput {
    const input = this.fedTokens.resolve(stepInput);
    const spec = this.spec;
    const { hiddenSize: H, numHeads: nH, numKvHeads: nKv, headDim: d, numLayers: L, topK: K } = spec;
    const qW = nH * d;
    const kvW = nKv * d;
    const chunks = input.chunks;
    if (chunks.length === 0) throw new ResidencyError('BAD_ARGUMENT', 'forward: a step needs at least one chunk');
    const logits = logitsOut(input, spec.vocabSize);
    let T = 0;
    for (const c of chunks) T += c.tokens.length;
    const s = this.ensureScratch(T, chunks.length);

    // Check every chunk and its block table (nothing is written before all pass), then embed every token and
    // resolve its position, its table and the row it writes.
    const pool = this.kvCache;
    const bs = pool.blockSize;
    let tableLen = 0;
    for (const c of chunks) tableLen += Math.ceil((c.startPos + c.tokens.length) / bs);
    if (this.tables.length < tableLen) {
      this.compute.forget(this.tables);
      this.tables = this.alloc.i32(Math.max(tableLen, 2 * this.tables.length));
    }
    const table = this.tables;
    const seen = new Set<number>();
    const written = new Set<number>();
    let at = 0;
    for (const c of chunks) {
      if (c.tokens.length === 0) throw new ResidencyError('BAD_ARGUMENT', `forward: chunk for seq ${c.seq} has no tokens`);
      if (seen.has(c.seq)) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} appears twice in one step`);
      seen.add(c.seq);
      const end = c.startPos + c.tokens.length;
      if (!Number.isInteger(c.startPos) || c.startPos < 0 || end > spec.maxPositions) {
        throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq}: positions ${c.startPos}..${end - 1} are not in [0, ${spec.maxPositions}) (the model's max positions)`);
      }
      const bt = c.blockTable;
      if (!bt) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} has no blockTable (the KV cache is paged: every chunk names its blocks)`);
      const nb = Math.ceil(end / bs);
      if (bt.length < nb) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq}: blockTable holds ${bt.length} blocks; positions up to ${end - 1} need ${nb} of ${bs}`);
      for (let b = 0; b < nb; b++) {
        const id = bt[b]!;
        if (!Number.isInteger(id) || id < 0 || id >= pool.numBlocks) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq}: blockTable[${b}] = ${id} is not a block in [0, ${pool.numBlocks})`);
        if (b >= Math.floor(c.startPos / bs)) {
          if (written.has(id)) throw new ResidencyError('BAD_ARGUMENT', `forward: block ${id} is written by two chunks of one step (seq ${c.seq}'s among them)`);
          written.add(id);
        }
      }
      for (const tok of c.tokens) {
        if (!Number.isInteger(tok) || tok < 0 || tok >= spec.vocabSize) {
          throw new ResidencyError('BAD_ARGUMENT', `forward: token ${tok} of seq ${c.seq} is not in [0, ${spec.vocabSize})`);
        }
      }
    }
    let t = 0;
    for (const c of chunks) {
      const bt = c.blockTable!;
      const nb = Math.ceil((c.startPos + c.tokens.length) / bs);
      for (let b = 0; b < nb; b++) table[at + b] = bt[b]!;
      for (let j = 0; j < c.tokens.length; j++, t++) {
        const p = c.startPos + j;
        embedding(s.x, t * H, this.weights.embed, c.tokens[j]!, H);
        s.pos[t] = p;
        s.tableOf[t] = at;
        s.rowOf[t] = bt[Math.floor(p / bs)]! * bs + (p % bs);
      }
      at += nb;
    }
    const pages: KvPages = { table, tableOf: s.tableOf, rowOf: s.rowOf, blockSize: bs };

    const record = input.recordRouting === true;
    const Lm = moeLayerCount(spec);
    const E = spec.numExperts;
    const routing = record ? new Int32Array(T * Lm * K) : undefined;
    const routingWeights = record ? new Float32Array(T * Lm * K) : undefined;
    const probs = record && this.options.keepRouterProbs ? new Float32Array(T * Lm * E) : null;
    const counter = input.count ? this.counter : null;
    let coldPicks = 0;

    // Each layer's input_layernorm: layer 0's here, the next layer's with each layer's last residual add (residual()).
    for (let i = 0; i < T; i++) rmsnorm(s.xn, i * H, s.x, i * H, this.weights.layers[0]!.inputNorm, H, spec.rmsNormEps);
    for (let l = 0; l < L; l++) {
      const w = this.weights.layers[l]!;
      // Attention block: h = x + o_proj(attn(input_layernorm(x))).
      const mla = this.mla[l];
      if (mla) {
        mlaAttention(s.attn, s.xn, T, mla, spec, s.mla!, s.pos, pool.keys[l]!, pool.values[l]!, pages, this.kvCode, this.projectOp, this.cos, this.sin, this.scores, this.attnAcc);
        this.project(s.proj, this.oProjs[l]!, s.attn, T, H, nH * spec.mla!.vHeadDim);
      } else {
        this.attention(l, T, s, pages);
        this.project(s.proj, this.oProjs[l]!, s.attn, T, H, qW);
      }
      if (w.oBias) addBias(s.proj, T, w.oBias);
      // MLP block: out = h + moe(post_attention_layernorm(h)) (a dense layer: its MLP; + the shared expert).
      this.compute.addNorm(s.x, s.proj, s.xn, this.norms[l]!.post, T, H, spec.rmsNormEps);
      const m = this.moeIndex[l]!;
      if (m < 0) {
        this.mlps!.dense(l, s.proj, s.xn, T);
        this.residual(s, T, l);
        continue;
      }
      const extras = w.routerBias || w.correctionBias ? { bias: w.routerBias, correction: w.correctionBias } : undefined;
      coldPicks += moeLayer(s.proj, s.xn, T, m, this.routers[l]!, this.banks, this.moeShape, s.moe, counter, this.compute, extras);
      if (w.shared) this.mlps!.addShared(l, s.proj, s.xn, T);
      this.residual(s, T, l);
      if (routing && routingWeights) {
        for (let i = 0; i < T; i++) {
          routing.set(s.moe.ids.subarray(i * K, i * K + K), (i * Lm + m) * K);
          routingWeights.set(s.moe.weights.subarray(i * K, i * K + K), (i * Lm + m) * K);
          if (probs) probs.set(s.moe.routerProbs.subarray(i * E, i * E + E), (i * Lm + m) * E);
        }
      }
    }
    // Final norm and lm head only for each chunk's last token.
    let end = 0;
    for (let ci = 0; ci < chunks.length; ci++) {
      end += chunks[ci]!.tokens.length;
      rmsnorm(s.last, ci * H, s.x, (end - 1) * H, this.weights.finalNorm, H, spec.rmsNormEps);
    }
    this.project(s.logits, this.lmHead, s.last, chunks.length, spec.vocabSize, H);
    this.lastColdPicks = coldPicks;
    if (record) this.lastRouterProbs = probs;
    logits.set(s.logits.subarray(0, chunks.length * spec.vocabSize));
    const out: StepOutput = { logits };
    const result = withHostArgmax(input, record ? { ...out, routing, routingWeights } : out, spec.vocabSize);
    this.fedTokens.record(input, result);
    return result;
  }

  /** Layer l's last residual add, x += proj, with the next layer's input_layernorm into xn (none after the last). */
  private residual(s: Scratch, T: number, l: number): void {
    const H = this.spec.hiddenSize;
    if (l + 1 < this.spec.numLayers) this.compute.addNorm(s.x, s.proj, s.xn, this.norms[l + 1]!.input, T, H, this.spec.rmsNormEps);
    else addInPlace(s.x, 0, s.proj, 0, T * H);
  }

  /** y = W x for T rows: float32 W through the compute (threads, SIMD), a quantized W as stored (quant-linear.ts). */
  private project(y: Float32Array, w: Matrix, x: Float32Array, T: number, outDim: number, inDim: number): void {
    if (isBf16(w)) this.compute.linearBf16(y, w, x, T);
    else if (isQuantized(w)) linearQ(y, w, x, T);
    else this.compute.linear(y, w, 0, x, T, outDim, inDim);
  }

  /** `project` as a function (MLA's projections). */
  private readonly projectOp: Project = (y, w, x, T, outDim, inDim) => this.project(y, w, x, T, outDim, inDim);

  /** q/k/v attention of layer `l` (every family but MLA) into s.attn: Qwen3's, with the families' variants. */
  private attention(l: number, T: number, s: Scratch, pages: KvPages): void {
    const spec = this.spec;
    const { hiddenSize: H, numHeads: nH, numKvHeads: nKv, headDim: d } = spec;
    const qW = nH * d;
    const kvW = nKv * d;
    const w = this.weights.layers[l]!;
    const fused = this.qkv[l];
    const shape = this.qkvShapes[l];
    if (fused && shape) {
      // Qwen3: q, k, v and their prologue (norms, RoPE, cache writes) as one op the threads split by tokens.
      this.compute.qkv(s.qkv, fused, s.xn, T, H, s.q, this.kvCache.keys[l]!, this.kvCache.values[l]!, pages, s.pos, shape);
      this.attend(l, T, s, pages);
      return;
    }
    if (fused) {
      // Threads: q, k and v as one linear over the stacked rows (one hand-off instead of three), then
      // unstacked; each output is the same dot product as the three separate layers compute.
      const W = qW + 2 * kvW;
      this.compute.linear(s.qkv, fused, 0, s.xn, T, W, H);
      for (let i = 0; i < T; i++) {
        s.q.set(s.qkv.subarray(i * W, i * W + qW), i * qW);
        s.k.set(s.qkv.subarray(i * W + qW, i * W + qW + kvW), i * kvW);
        s.v.set(s.qkv.subarray(i * W + qW + kvW, i * W + W), i * kvW);
      }
    } else {
      const p = this.qkvProjs[l]!;
      for (const [y, m, n] of [[s.q, p.q, qW], [s.k, p.k, kvW], [s.v, p.v, kvW]] as const) this.project(y, m, s.xn, T, n, H);
    }
    if (w.qBias) addBias(s.q, T, w.qBias);
    if (w.kBias) addBias(s.k, T, w.kBias);
    if (w.vBias) addBias(s.v, T, w.vBias);
    const qkNorm = spec.qkNorm ?? 'head';
    for (let i = 0; i < T; i++) {
      if (qkNorm === 'head') {
        headNorm(s.q, i * qW, nH, d, w.qNorm, spec.rmsNormEps);
        headNorm(s.k, i * kvW, nKv, d, w.kNorm, spec.rmsNormEps);
      } else if (qkNorm === 'whole') {
        rmsnorm(s.q, i * qW, s.q, i * qW, w.qNorm, qW, spec.rmsNormEps);
        rmsnorm(s.k, i * kvW, s.k, i * kvW, w.kNorm, kvW, spec.rmsNormEps);
      }
      const p = s.pos[i]!;
      for (let h = 0; h < nH; h++) rope(s.q, i * qW + h * d, d, this.cos, this.sin, p);
      for (let h = 0; h < nKv; h++) rope(s.k, i * kvW + h * d, d, this.cos, this.sin, p);
      const row = pages.rowOf[i]! * kvW;
      const keys = this.kvCache.keys[l]!;
      const values = this.kvCache.values[l]!;
      keys.set(s.k.subarray(i * kvW, i * kvW + kvW), row);
      values.set(s.v.subarray(i * kvW, i * kvW + kvW), row);
      roundKvInPlace(this.kvCode, keys, row, kvW);
      roundKvInPlace(this.kvCode, values, row, kvW);
    }
    this.attend(l, T, s, pages);
  }

  /** Attention of layer `l` over s.q and the layer's cache rows through the step's block tables (this step's positions written). */
  private attend(l: number, T: number, s: Scratch, pages: KvPages): void {
    const { numHeads: nH, numKvHeads: nKv, headDim: d } = this.spec;
    const w = this.weights.layers[l]!;
    const window = this.spec.slidingWindows?.[l] ?? 0;
    const keys = this.kvCache.keys[l]!;
    const values = this.kvCache.values[l]!;
    if (window > 0 || w.sinks) {
      attentionWindowed(s.attn, s.q, T, keys, values, pages, s.pos, nH, nKv, d, window, w.sinks, this.scores, this.attnAcc);
    } else {
      this.compute.attention(s.attn, s.q, T, keys, values, pages, s.pos, nH, nKv, d, this.scores, this.attnAcc);
    }
  }

  private ensureScratch(tokens: number, chunks: number): Scratch {
    const cur = this.scratch;
    if (cur && cur.tokens >= tokens && cur.chunks >= chunks) return cur;
    const spec = this.spec;
    // Grow to the next power of two so a slowly growing batch does not reallocate every step.
    const T = Math.max(nextPow2(tokens), cur?.tokens ?? 0);
    const C = Math.max(nextPow2(chunks), cur?.chunks ?? 0);
    if (cur) {
      // The workers may hold the old buffers: let them go.
      const m = cur.moe;
      for (const a of [cur.x, cur.xn, cur.q, cur.k, cur.v, cur.qkv, cur.attn, cur.proj, cur.last, cur.logits, m.routerLogits, m.routerProbs, m.ids, m.weights, m.pickOut, m.units, m.unitPicks]) this.compute.forget(a);
      if (cur.mla) for (const a of [cur.mla.qa, cur.mla.q, cur.mla.ckv, cur.mla.c, cur.mla.kv]) this.compute.forget(a);
    }
    const H = spec.hiddenSize;
    const qW = spec.numHeads * spec.headDim;
    const kvW = spec.numKvHeads * spec.headDim;
    this.scratch = {
      tokens: T,
      chunks: C,
      x: this.alloc.f32(T * H),
      xn: this.alloc.f32(T * H),
      q: this.alloc.f32(T * qW),
      k: this.alloc.f32(T * kvW),
      v: this.alloc.f32(T * kvW),
      qkv: this.alloc.f32(this.qkv[0] ? T * (qW + 2 * kvW) : 0),
      attn: this.alloc.f32(T * (spec.mla ? spec.numHeads * spec.mla.vHeadDim : qW)),
      proj: this.alloc.f32(T * H),
      pos: new Int32Array(T),
      tableOf: this.alloc.i32(T),
      rowOf: this.alloc.i32(T),
      last: this.alloc.f32(C * H),
      logits: this.alloc.f32(C * spec.vocabSize),
      moe: moeScratch(T, H, spec.numExperts, spec.topK, this.alloc, spec.expertAct || this.banks.quant ? spec.expertIntermediate : 0),
      mla: spec.mla ? mlaScratch(spec, T, (n) => this.alloc.f32(n)) : null,
    };
    return this.scratch;
  }
}

function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** A CPU backend over float32 weights; `placement` sets the initial hot/cold map. */
export function createCpuBackend(spec: ModelSpec, weights: ModelWeights, options?: CpuBackendOptions): CpuBackend {
  return new CpuBackend(spec, weights, options);
}
