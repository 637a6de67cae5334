// The kernels of one piece in stream order (the backend's step: cuda-backend.ts enqueues a piece eagerly or
// inside a decode graph's capture): per layer the residual and input norm, q | k | v (or latent attention), the
// attention and its merge, o_proj, the router (after the post-attention norm), route and group, the experts'
// gate/up and down (or a dense layer's MLP, a shared expert beside them); then the final norm of the rows whose
// logits are wanted and the LM head. Products are gemv (decode, <= 16 rows a group) or tensor-core tiles. At batch 1
// the down product adds the picks to the residual and the next input norm runs in the q | k | v gemv (fuseResidual),
// unless the host expert lane takes some cold picks (host_exchange.cuh): then the next norm combines them (the same bits).
// The lane takes decode steps of at most MAILBOX.maxPicks picks (rows x top-k: op_route_group's one-warp grouping).
import { ResidencyError } from '../../../errors.ts';
import type { KvDtypeCode } from '../../kv-dtype.ts';
import { moeLayerCount, type ModelSpec } from '../../../model/spec.ts';
import type { CudaExpertBanks } from '../banks/banks.ts';
import type { ExpertRowLayout, ProductWeights, WeightFormat } from '../weights/device-weights.ts';
import type { CudaDriver } from '../driver/driver.ts';
import type { AttendHeadDim, KernelName } from '../driver/kernels.ts';
import { encodeAttn, encodeGroups, encodeHostPost, encodeRoute, encodeRows, gemvStagesWhole, groupSmemBytes, maxGroupedTiles, residualNormSmemBytes, routeGroupSmemBytes, routeRowsSmemBytes, stepLayout, type GemmArgs, type MlaArgs, type RouteMode } from './kernel-args.ts';
import { HOST_STATE, MAILBOX } from '../host-lane/lane.ts';
import { bucketFor, combineRowsPerWarp, DECODE_MAX_ROWS, gemvRowsPerWarp, oneWaveFeatureBlocks } from './plan.ts';
import type { DenseDev, LayerDev } from '../weights/resident-weights.ts';
import {
  argmaxLaunch, attendLaunch, attendMergeLaunch, combineLaunch, gemmTcLaunch, gemvEvenLaunch, gemvLaunch, GEMV_WARPS, groupLaunch, hostCollectLaunch,
  hostExchangeLaunch, mlaAttendLaunch, mlaNormRopeKvLaunch, mlaOAbsorbLaunch, mlaQAbsorbLaunch, qkNormWholeLaunch, qkRopeKvLaunch, residualNormLaunch,
  routeGroupLaunch, routeRowsLaunch, type GemvRows, type Launch,
} from './launches.ts';

/** The kernel arguments of a product's FP8 scale grid (none for bf16). */
export function gridArgs(p: ProductWeights): Pick<GemmArgs, 'sRows' | 'sCols' | 'sLd'> {
  return p.grid ? { sRows: p.grid.sRows, sCols: p.grid.sCols, sLd: p.grid.sLd } : {};
}

/** product.cuh's GemmProblem.l2 bit. */
const L2_EVICT_FIRST = 1;

/** What the step's kernels read and write on the device: the backend's weights, buffers and launch options. */
export interface StepDevice {
  readonly d: CudaDriver;
  readonly spec: ModelSpec;
  readonly stream: bigint;
  readonly fns: ReadonlyMap<KernelName, bigint>;
  readonly layers: readonly LayerDev[];
  readonly embed: bigint;
  readonly lmHead: bigint;
  readonly finalNorm: bigint;
  /** RoPE's inverse frequencies [hd / 2] (the spec's: ropeFrequencies) and the factor on cos and sin. */
  readonly invFreq: bigint;
  readonly ropeScale: number;
  readonly counterDev: bigint;
  /** The paged KV pool the attention kernels read and write: its address, block size and dtype, a table's most blocks. */
  readonly kv: { readonly pool: bigint; readonly blockSize: number; readonly dtype: KvDtypeCode; readonly maxBlocks: number };
  /** The piece's work buffers by name (workspace.ts) and its step rows (stepLayout). */
  readonly buffers: Readonly<Record<string, bigint>>;
  readonly stepDev: bigint;
  readonly banks: CudaExpertBanks;
  readonly rowLayout: ExpertRowLayout;
  readonly routeMode: RouteMode;
  /** Width of a row of q | k | v. */
  readonly QKV: number;
  /** Programmatic dependent launch between the kernels; with it, dense gemvs' first weight loads before the wait. */
  readonly pdl: boolean;
  readonly earlyWeights: boolean;
  /**
   * Decode products' weight loads marked evict-first in L2 (each byte is read once a step), so what the small kernels
   * read and write (activations, the KV cache) outlives the weight stream.
   */
  readonly evictFirst: boolean;
  /**
   * Batch-1 decode: the expert down product adds its picks to the residual itself (router order, the same bits as the
   * residual+norm kernel) and the next layer's input norm runs inside its q | k | v product, one launch a layer fewer.
   */
  readonly fuseResidual: boolean;
  /** The combining down product's features a warp (default: combineRowsPerWarp). */
  readonly combineRows?: 1 | 2 | 4;
  /** Batch 1, bf16: a dense product that stores (q | k | v) split evenly over one wave of blocks, where that is more blocks. */
  readonly oneWaveDense: boolean;
  /**
   * The host expert lane (host-lane/lane.ts): at decode steps of at most MAILBOX.maxPicks picks the routing hands some of
   * each layer's distinct cold experts (the state's split table) to the host's threads, and op_host_collect brings their
   * picks' outputs into the partial rows.
   */
  readonly hostLane?: { readonly mailboxDev: bigint; readonly stateDev: bigint; readonly parts: number };
}

/**
 * Raises the dynamic shared memory limit (48 KiB by default) of the kernels whose launches below may need more: a
 * gemv's input rows (up to 64 KiB: B rows x K chunk), and the routing and residual+norm scratch, which grows with the
 * experts and the hidden size (op_route_group at 16 rows: 54 KiB at 384 experts with group choice).
 */
export function raiseSharedMemoryLimits(d: CudaDriver, fns: ReadonlyMap<KernelName, bigint>, spec: ModelSpec, mode: RouteMode): void {
  const { numExperts: E, topK: K, hiddenSize: H } = spec;
  for (const [name, fn] of fns) if (name.startsWith('op_gemv_')) d.setMaxDynamicSmem(fn, 64 * 1024, name);
  const sized: [KernelName, number][] = [
    ['op_route_group', routeGroupSmemBytes(DECODE_MAX_ROWS, K, E, mode)], ['op_route_rows', routeRowsSmemBytes(mode, E)],
    ['op_group', groupSmemBytes(E)], ['op_residual_norm', residualNormSmemBytes(H)],
  ];
  for (const [name, bytes] of sized) if (bytes > 48 * 1024) d.setMaxDynamicSmem(fns.get(name)!, bytes, name);
}

/** A launch as recorded for profiling: its kernel, the role it plays in the step, and how to replay it. */
export interface RecordedLaunch { name: string; role: string; run: () => void }

export class OpStepKernels {
  /** When set, every launch is also recorded here (CudaBackend.profilePiece). */
  recording: RecordedLaunch[] | null = null;
  private role = '';
  /** The next launch follows a kernel on the stream (a piece's first follows the copy of its rows). */
  private afterKernel = false;
  private readonly d: CudaDriver;
  private readonly spec: ModelSpec;
  private readonly stream: bigint;
  private readonly fns: ReadonlyMap<KernelName, bigint>;
  private readonly layers: readonly LayerDev[];
  private readonly embed: bigint;
  private readonly lmHead: bigint;
  private readonly finalNorm: bigint;
  private readonly invFreq: bigint;
  private readonly ropeScale: number;
  private readonly counterDev: bigint;
  private readonly b: Readonly<Record<string, bigint>>;
  private readonly stepDev: bigint;
  private readonly banks: CudaExpertBanks;
  private readonly rowLayout: ExpertRowLayout;
  private readonly routeMode: RouteMode;
  private readonly QKV: number;
  private readonly pdl: boolean;
  private readonly earlyWeights: boolean;
  private readonly evictFirst: boolean;
  private readonly fuseResidual: boolean;
  private readonly combineRows?: 1 | 2 | 4;
  private readonly oneWaveDense: boolean;
  private readonly hostLane: StepDevice['hostLane'];
  private readonly kv: StepDevice['kv'];

  constructor(dev: StepDevice) {
    ({ d: this.d, spec: this.spec, stream: this.stream, fns: this.fns, layers: this.layers, embed: this.embed, lmHead: this.lmHead, finalNorm: this.finalNorm,
      invFreq: this.invFreq, ropeScale: this.ropeScale, counterDev: this.counterDev, buffers: this.b, stepDev: this.stepDev, banks: this.banks,
      rowLayout: this.rowLayout, routeMode: this.routeMode, QKV: this.QKV, pdl: this.pdl, earlyWeights: this.earlyWeights, evictFirst: this.evictFirst,
      fuseResidual: this.fuseResidual, combineRows: this.combineRows, oneWaveDense: this.oneWaveDense, hostLane: this.hostLane, kv: this.kv } = dev);
  }

  private ptr(name: string): bigint {
    return this.b[name]!;
  }

  /** Every kernel of a piece of T rows, in stream order; `gemv`: the products are gemv (decode), else tensor-core tiles. */
  enqueue(T: number, gemv: boolean, S: number, nOut: number, fusedAttention: boolean): void {
    this.afterKernel = false;
    const s = this.spec;
    const { hiddenSize: H, numExperts: E, topK: K, expertIntermediate: I, vocabSize: V, numLayers: L } = s;
    const LK = moeLayerCount(s) * K;
    const kv = this.kv;
    const o = stepLayout(T, kv.maxBlocks);
    const at = (off: number): bigint => this.stepDev + BigInt(off);
    const rows = encodeRows({ token: at(o.token), pos: at(o.pos), table: at(o.table), pool: kv.pool, blockSize: kv.blockSize, layers: s.numLayers, dtype: kv.dtype });
    const header = this.stepDev;
    const outRows = at(o.out);
    const norm = (mode: 0 | 1 | 2, prev: number, rowsPtr: bigint, w: bigint, out: bigint, grid: number): void => {
      this.launch(residualNormLaunch(grid, {
        mode, hidden: this.ptr('hidden'), partial: this.ptr('partial'), pickWeight: this.ptr('pickW'), LK, prevLayer: prev, K, rows: rowsPtr,
        tokens: at(o.token), fedKeys: this.ptr('argmaxKeys'), embed: this.embed, w, out, H, eps: s.rmsNormEps,
      }));
    };
    // A SwiGLU MLP outside the banks (a dense layer's, a shared expert): gate | up from xn, down added to hidden.
    const mlp = (m: NonNullable<LayerDev['mlp']>, role: string): void => {
      this.product(`${role}_gate_up`, gemv, T, 'swiglu', { x: this.ptr('xn'), y: this.ptr('mlpAct'), w: m.gateUp.w, scales: m.gateUp.grid, ...gridArgs(m.gateUp.p), ldx: H, ldy: m.I, O: m.I, K: H, rows: T }, m.gateUp.p.format);
      this.dense(`${role}_down`, gemv, T, 'add', m.down, { x: this.ptr('mlpAct'), y: this.ptr('hidden'), res: this.ptr('hidden'), ldx: m.I, ldy: H, O: H, K: m.I, rows: T });
    };
    const banks = this.banks;
    // The residual a layer's first norm adds: the embedding (layer 0), the previous MoE layer's picks (mode 1,
    // that layer's index among the MoE layers), or nothing more (mode 2: a dense layer added its MLP already, or
    // the MoE layer's down product its picks).
    let prevMoe = -1;
    const residualMode = (l: number): 0 | 1 | 2 => (l === 0 ? 0 : prevMoe >= 0 ? 1 : 2);
    // With the host lane a decode step's picks are combined by the next norm (op_residual_norm mode 1), after
    // op_host_collect has put the host's outputs in their partial rows.
    const lane = gemv && T * K <= MAILBOX.maxPicks ? this.hostLane : undefined;
    const combine = this.fuseResidual && gemv && T === 1 && K <= GEMV_WARPS && !lane;
    for (let l = 0; l < L; l++) {
      const ly = this.layers[l]!;
      // With nothing to add, the input norm runs inside the q | k | v gemv (each block normalizes the rows it staged).
      const normInQkv = this.fuseResidual && gemv && !ly.mla && residualMode(l) === 2 && gemvStagesWhole(T, H);
      if (!normInQkv) norm(residualMode(l), Math.max(prevMoe, 0), 0n, ly.inNorm, this.ptr('xn'), T);
      if (ly.mla) this.enqueueLatentAttention(ly, l, gemv, T, rows);
      else this.enqueueAttention(ly, l, gemv, T, S, rows, fusedAttention, normInQkv);
      const m = ly.moe;
      if (m < 0) {
        norm(2, 0, 0n, ly.postNorm, this.ptr('xn'), T);
        mlp(ly.mlp!, 'mlp');
        prevMoe = -1;
        continue;
      }
      if (gemv && gemvStagesWhole(T, H)) {
        // The post-attention norm inside the router's gemv (each block normalizes the rows it staged).
        this.product('router', gemv, T, 'store', { x: this.ptr('hidden'), y: this.ptr('rlog'), w: ly.router, ldx: H, ldy: E, O: E, K: H, rows: T, normW: ly.postNorm, normOut: this.ptr('xn'), eps: s.rmsNormEps, bias: ly.routerBias });
      } else {
        norm(2, 0, 0n, ly.postNorm, this.ptr('xn'), T);
        this.product('router', gemv, T, 'store', { x: this.ptr('xn'), y: this.ptr('rlog'), w: ly.router, ldx: H, ldy: E, O: E, K: H, rows: T, bias: ly.routerBias });
      }
      const r = s.router;
      const route = encodeRoute({
        logits: this.ptr('rlog'), pickExpert: this.ptr('pickE'), pickWeight: this.ptr('pickW'), pickSlot: this.ptr('pickSlot'),
        slots: banks.slotTableDev + BigInt(4 * m * E), counter: this.counterDev + BigInt(4 * m * E), header, T, E, K, LK, layer: m, mode: this.routeMode,
        ...(r?.kind === 'sigmoid_group' ? { group: { choiceBias: ly.choiceBias, nGroup: r.nGroup, topkGroup: r.topkGroup, scaling: r.scalingFactor, renorm: s.normTopkProb } } : {}),
      });
      const groups = encodeGroups({ n: this.ptr('grpN'), slot: this.ptr('grpSlot'), start: this.ptr('grpStart'), rows: this.ptr('grpRows'), tileN: this.ptr('tileN'), tileGroup: this.ptr('tileGroup'), tileRow0: this.ptr('tileRow0') });
      if (gemv) {
        const post = lane ? { mailbox: lane.mailboxDev, state: lane.stateDev, x: this.ptr('xn'), hotRows: banks.hotRowsAllocated, I, H, layer: m } : null;
        this.launch(routeGroupLaunch(T, K, E, this.routeMode, route, groups, encodeHostPost(post)));
      } else {
        this.launch(routeRowsLaunch(T, E, this.routeMode, route));
        this.launch(groupLaunch(E, route, groups));
      }
      // The shared expert (DeepSeek) beside the routed ones, on the same normalized rows.
      if (ly.mlp) mlp(ly.mlp, 'shared');
      const grouped = {
        grpN: this.ptr('grpN'), grpSlot: this.ptr('grpSlot'), grpStart: this.ptr('grpStart'), grpRows: this.ptr('grpRows'), hot: banks.hotDev[m]!, cold: banks.coldDev[m]!, hotRows: banks.hotRowsAllocated,
        tileN: this.ptr('tileN'), tileGroup: this.ptr('tileGroup'), tileRow0: this.ptr('tileRow0'), rowBytes: banks.rowBytes,
      };
      const row = this.rowLayout;
      const act = s.expertAct ? { limit: s.expertAct.limit, alpha: s.expertAct.alpha } : {};
      // With the lane an expert may be split with the host: each product computes its units / features from the split on.
      const splits = lane && lane.parts > 1 ? lane : undefined;
      const part = (at: number) => (splits ? { part: splits.stateDev + BigInt(4 * at) } : {});
      this.product('experts_gate_up', gemv, T, 'swiglu', {
        ...grouped, x: this.ptr('xn'), y: this.ptr('act'), ldx: H, ldy: I, O: I, K: H, xDiv: K, wOff: row.gateUpAt, sOff: row.gateUpGridAt, ...gridArgs(row.gateUp),
        bOff: row.gateUpBiasAt, guInterleave: row.interleaved, ...act, ...part(HOST_STATE.splitGateUp),
      }, row.format);
      if (splits) {
        // The split expert's units: the GPU's to the host, the host's into act.
        this.role = 'host_exchange';
        this.launch(hostExchangeLaunch({ mailbox: splits.mailboxDev, state: splits.stateDev, act: this.ptr('act'), H, I }));
        this.role = '';
      }
      // The down product's groups were written by the routing, before gate/up: its weights may load early.
      const down = { ...grouped, x: this.ptr('act'), ldx: I, ldy: H, O: H, K: I, xDiv: 1, wOff: row.downAt, sOff: row.downGridAt, ...gridArgs(row.down), bOff: row.downBiasAt, ...part(HOST_STATE.splitDown) };
      if (combine) {
        // Each pick's bank row from the routing's pick slots; the picks combined onto hidden in the epilogue.
        const pickW = this.ptr('pickW') + BigInt(4 * m * K);
        this.product('experts_down', gemv, T, 'combine', { ...down, grpSlot: this.ptr('pickSlot'), pickW, y: this.ptr('hidden'), res: this.ptr('hidden'), rows: K }, row.format, true);
        prevMoe = -1;
      } else {
        this.product('experts_down', gemv, T, 'store', { ...down, y: this.ptr('partial') }, row.format, true);
        if (lane) {
          this.role = 'host_collect';
          this.launch(hostCollectLaunch({ mailbox: lane.mailboxDev, state: lane.stateDev, partial: this.ptr('partial'), H }));
          this.role = '';
        }
        prevMoe = m;
      }
    }
    const nOutB = bucketFor(nOut, [1, 2, 4, 8, 16]);
    norm(residualMode(L), Math.max(prevMoe, 0), outRows, this.finalNorm, this.ptr('xf'), nOutB);
    this.product('lm_head', true, nOutB, 'store', { x: this.ptr('xf'), y: this.ptr('logits'), w: this.lmHead, ldx: H, ldy: V, O: V, K: H, rows: nOutB });
  }

  /**
   * Each of the first `rows` logits rows' argmax keys into argmaxKeys (ARGMAX_BLOCKS a row; StepInput.argmaxOnly), and
   * into mapped host memory at `hostKeys` (its device address) when given.
   */
  enqueueArgmax(rows: number, hostKeys = 0n): void {
    this.launch(argmaxLaunch(rows, { logits: this.ptr('logits'), V: this.spec.vocabSize, keys: this.ptr('argmaxKeys'), hostKeys }));
  }

  /** A layer's q | k | v attention, from xn (or hidden, normalized inside the q | k | v gemv: normInQkv) to hidden += o_proj(attention). */
  private enqueueAttention(ly: LayerDev, l: number, gemv: boolean, T: number, S: number, rows: Uint8Array, fusedAttention: boolean, normInQkv: boolean): void {
    const s = this.spec;
    const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: hd } = s;
    const QD = nh * hd;
    const qkv = ly.qkv!;
    const input = normInQkv ? { x: this.ptr('hidden'), normW: ly.inNorm, eps: s.rmsNormEps } : { x: this.ptr('xn') };
    this.product('qkv', gemv, T, 'store', { ...input, y: this.ptr('qkv'), w: qkv.w, scales: qkv.grid, ...gridArgs(qkv.p), ldx: H, ldy: this.QKV, O: this.QKV, K: H, rows: T, bias: ly.qkvBias }, qkv.p.format);
    const whole = s.qkNorm === 'whole';
    if (whole) {
      this.launch(qkNormWholeLaunch(T, { qkv: this.ptr('qkv'), ld: this.QKV, qNorm: ly.qNorm, kNorm: ly.kNorm, QD, KD: nkv * hd, eps: s.rmsNormEps }));
    }
    const params = encodeAttn({ qNorm: whole ? 0n : ly.qNorm, kNorm: whole ? 0n : ly.kNorm, invFreq: this.invFreq, sinks: ly.sinks, eps: s.rmsNormEps, mscale: this.ropeScale, window: ly.window });
    const attention = { qkv: this.ptr('qkv'), ld: this.QKV, rows, params, layer: l, nh, nkv, hd: hd as AttendHeadDim };
    const out = { att: this.ptr('att'), part: this.ptr('attnPart') };
    if (fusedAttention) {
      // Decode rows of distinct sequences: q/k norm, RoPE and the KV write happen inside the attention blocks.
      this.launch(attendLaunch(true, T, S, { ...attention, ...out }));
    } else {
      // Rows that read each other's k and v (a prefill chunk): every row's are written first.
      this.launch(qkRopeKvLaunch(T, attention));
      this.launch(attendLaunch(false, T, S, { ...attention, ...out }));
    }
    if (S > 1) this.launch(attendMergeLaunch(T, { part: this.ptr('attnPart'), att: this.ptr('att'), nh, hd, S, sinks: ly.sinks }));
    this.dense('o_proj', gemv, T, 'add', ly.o, { x: this.ptr('att'), y: this.ptr('hidden'), res: this.ptr('hidden'), ldx: QD, ldy: H, O: H, K: QD, rows: T, bias: ly.oBias });
  }

  /**
   * A layer's multi-head latent attention (DeepSeek-V3, mla.cuh), from xn to hidden += o_proj(attention):
   * q_a | kv_a, their norms with RoPE and the latent cache write, q_b, the query absorbed into latent space,
   * attention over the latent cache, the values out of it, o_proj. Every row's cache entry lands before any
   * row attends, so prefill chunks and gemv rows take the same launches.
   */
  private enqueueLatentAttention(ly: LayerDev, l: number, gemv: boolean, T: number, rows: Uint8Array): void {
    const s = this.spec;
    const m = s.mla!;
    const w = ly.mla!;
    const { hiddenSize: H, numHeads: nh, headDim: rope } = s;
    const A = m.qLoraRank + m.kvLoraRank + rope, qk = m.qkNopeDim + rope;
    const params: MlaArgs = {
      qANorm: w.qANorm, kvANorm: w.kvANorm, kvB: w.kvB.w, kvBScales: w.kvB.grid, ...gridArgs(w.kvB.p), invFreq: this.invFreq, eps: s.rmsNormEps, mscale: this.ropeScale, scale: m.softmaxScale,
      nh, qLora: m.qLoraRank, kvLora: m.kvLoraRank, rope, nope: m.qkNopeDim, vd: m.vHeadDim, layer: l,
    };
    this.dense('mla_a', gemv, T, 'store', w.a, { x: this.ptr('xn'), y: this.ptr('mlaA'), ldx: H, ldy: A, O: A, K: H, rows: T });
    this.launch(mlaNormRopeKvLaunch(T, { a: this.ptr('mlaA'), lda: A, rows, m: params }));
    this.dense('mla_q_b', gemv, T, 'store', w.qB, { x: this.ptr('mlaA'), y: this.ptr('mlaQ'), ldx: A, ldy: nh * qk, O: nh * qk, K: m.qLoraRank, rows: T });
    const f = w.kvB.p.format;
    this.launch(mlaQAbsorbLaunch(f, T, { q: this.ptr('mlaQ'), rows, qlat: this.ptr('mlaQLat'), m: params }));
    this.launch(mlaAttendLaunch(T, { qlat: this.ptr('mlaQLat'), rows, olat: this.ptr('mlaOLat'), m: params }));
    this.launch(mlaOAbsorbLaunch(f, T, { olat: this.ptr('mlaOLat'), att: this.ptr('att'), m: params }));
    const QD = nh * m.vHeadDim;
    this.dense('o_proj', gemv, T, 'add', ly.o, { x: this.ptr('att'), y: this.ptr('hidden'), res: this.ptr('hidden'), ldx: QD, ldy: H, O: H, K: QD, rows: T });
  }

  /** A dense product of stored weights `w` (bf16 or block FP8 with its grid). */
  private dense(role: string, gemv: boolean, T: number, epi: 'store' | 'add' | 'swiglu', w: DenseDev, a: Omit<GemmArgs, 'w' | 'scales'>): void {
    this.product(role, gemv, T, epi, { ...a, w: w.w, scales: w.grid, ...gridArgs(w.p) }, w.p.format);
  }

  /**
   * One product: gemv (B = T rows a group) or the tensor-core tiles (prefill, large decode buckets), for weights stored
   * as `format`. `groupsSettled`: a grouped product whose groups were written before the kernel just before it (so with
   * PDL its group table and first weights load before the wait, as a dense product's weights do).
   */
  private product(role: string, gemv: boolean, T: number, epi: 'store' | 'add' | 'swiglu' | 'combine', a: GemmArgs, format: WeightFormat = 'bf16', groupsSettled = false): void {
    this.role = role;
    const grouped = a.grpN !== undefined;
    const { numExperts: E, topK: K } = this.spec;
    if (gemv) {
      // How a gemv's weights load: before the PDL wait where nothing before it decides them; evict-first in L2.
      if ((!grouped || groupsSettled) && this.earlyWeights) a = { ...a, early: true };
      if (this.evictFirst) a = { ...a, l2: L2_EVICT_FIRST };
    }
    if (epi === 'combine') {
      // A warp a pick (K of them), R features of every pick a block: one wave of blocks for bf16 rows; FP8 and MXFP4
      // rows keep the gemv's rule (4 a warp has not been measured for them).
      const R = this.combineRows ?? (format === 'bf16' ? combineRowsPerWarp(a.O, this.d.smCount) : gemvRowsPerWarp(a.O, K, this.d.smCount));
      this.launch(combineLaunch(format, R, K, a));
    } else if (gemv) {
      const groups = grouped ? Math.min(T * K, E) : 1;
      const feats = a.O;
      const R = gemvRowsPerWarp(feats, groups, this.d.smCount);
      // At batch 1 a dense product that stores (q | k | v) may fill one wave exactly, its features split evenly over the
      // warps (_even), where that is more blocks than R features a warp gives.
      const gxPlain = Math.ceil(feats / (GEMV_WARPS * R));
      const gxEven = this.oneWaveDense && T === 1 && format === 'bf16' && !grouped && epi === 'store' ? oneWaveFeatureBlocks(feats, groups, R, this.d.smCount) : 0;
      const oneWave = gxEven > gxPlain;
      this.launch(oneWave ? gemvEvenLaunch(R, gxEven, groups, a) : gemvLaunch(format, T as GemvRows, R, epi, groups, a));
    } else {
      const tiles = grouped ? maxGroupedTiles(T * K, E) : Math.ceil(T / 64);
      this.launch(gemmTcLaunch(format, epi, tiles, a));
    }
    this.role = '';
  }

  private launch({ name, grid, block, smem, args }: Launch): void {
    const fn = this.fns.get(name);
    if (fn === undefined) throw new ResidencyError('INTERNAL', `op kernel ${name} is not loaded`);
    const pdl = this.pdl && this.afterKernel;
    this.afterKernel = true;
    this.d.launch(fn, name, grid, block, smem, this.stream, args, pdl);
    this.recording?.push({ name, role: this.role || name.replace(/^op_/, ''), run: () => this.d.launch(fn, name, grid, block, smem, this.stream, args, this.pdl) });
  }
}
