// The host expert lane (host-lane/host_experts.c) through koffi: threads of the host CPU that compute some of a decode
// step's cold experts (each once for every row that picked it) from the cold bank's pinned memory while the GPU
// computes the rest, answering requests the routing kernel posts in a mailbox of mapped memory (kernels/host_exchange.cuh).
// Their sums keep the GPU's order (bf16, block-FP8 or MXFP4 experts), so a pick computed here has the bits the GPU would give
// it. One expert a layer may be split between the sides (the first units of its gate | up and features of its down
// product here, the rest on the GPU), the two exchanging their units through the mailbox in between.
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../../../errors.ts';
import type { ModelSpec } from '../../../model/spec.ts';
import type { ExpertRowLayout } from '../weights/device-weights.ts';
import type { CudaDriver } from '../driver/driver.ts';
import { HE_MATRIX_FIELDS, HE_ROW_FIELDS, heRow, laneFormat, laneRowRefusal, type LaneRow } from './lane-row.ts';
import { kernelDirCandidates } from '../driver/kernels.ts';
import { checkParts, HostSplit, MAX_PARTS, type SplitCells, type SplitReport } from './split.ts';
import { ResourceScope } from '../driver/resource-scope.ts';

const MAX_PICKS = 32;
/** The mailbox's layout (host_experts.c's HeMailbox, host_exchange.cuh's HostMailbox). */
export const MAILBOX = {
  /** Picks one request carries at most (a decode step's rows x top-k, as one warp groups them). */
  maxPicks: MAX_PICKS,
  reqSeq: 0,
  layer: 4,
  /** The step's picks. */
  n: 8,
  /** Picks a row: pick p is row floor(p / k)'s. */
  k: 12,
  /** Pick p's physical slot when the host computes it (whole or split), else -1. */
  slots: 16,
  /** The split expert's slot (-1: none), and the units of its gate | up and the features of its down product the host computes. */
  splitSlot: 144,
  splitUnits: 148,
  splitFeatures: 152,
  /** Written by the GPU: its units of the split expert are in `act`. */
  gpuActSeq: 156,
  doneSeq: 256,
  refused: 260,
  gpuTimeouts: 264,
  /** Written by the host: its units of the split expert are in `act`. */
  hostActSeq: 268,
  /** The rows' inputs, maxPicks rows of H floats. */
  x: 512,
  /** The picks' outputs, maxPicks rows of H floats (pick p's at row p). */
  y: (H: number): number => 512 + Math.ceil((4 * H * MAX_PICKS) / 64) * 64,
  /** The split expert's units, maxPicks rows of I floats (pick p's at row p). */
  act: (H: number): number => MAILBOX.y(H) + Math.ceil((4 * H * MAX_PICKS) / 64) * 64,
  bytes: (H: number, I: number): number => MAILBOX.act(H) + 4 * MAX_PICKS * I,
} as const;

/**
 * The lane's device state (host_exchange.cuh), int32 words: [0] request sequence, [1] the layer's whole host picks, [2]
 * stalled, [3] / [4] the layer's cold experts c and the host's parts h, [5] layers routed, [6..7] the routing's time;
 * the split expert's {slot, first unit the GPU computes} at `splitGateUp`, {slot, first feature} at `splitDown`, its
 * picks at `splitMask`; the parts an expert counts at `parts`; the split table take[0..32] (parts) at `take`; the GPU's
 * waits for the answer and for the host's units at `waitStats` (2 x {layers, ns}) and the layers' cold phases by (c, h)
 * at `cells` (33 x (MAX_PARTS x 32 + 1) x {layers, ns, sum of (ns / 1024)^2}), uint64. Every `explore`-th layer the
 * routing tries one part more or fewer.
 */
export const HOST_STATE = {
  splitGateUp: 8, splitDown: 10, splitMask: 12, parts: 13, take: 16, waitStats: 64, cells: 72, cellWords: 6,
  words: 72 + 6 * (MAX_PICKS + 1) * (MAX_PARTS * MAX_PICKS + 1), explore: 17,
} as const;
/** Decode steps between two updates of the split table from the measured times. */
export const SPLIT_UPDATE_STEPS = 64;

type Fn = (...args: unknown[]) => unknown;
export interface HostLaneLib {
  readonly path: string;
  simdAvailable(): boolean;
  /** One expert on the calling thread: h [I] and y [H] (the tests' entry); simd as he_expert. */
  expert(row: Uint8Array, at: LaneRow, H: number, I: number, x: Float32Array, simd: boolean): { h: Float32Array; y: Float32Array };
  /** The address of a buffer's bytes (tests stand a Buffer in for pinned memory). */
  address(buf: Uint8Array): bigint;
  readonly fns: Readonly<Record<'start' | 'stop' | 'stats' | 'laneSimd', Fn>>;
}

let cached: HostLaneLib | null = null;
/** koffi's types are named once a process (a second library loaded from another folder reuses them). */
let structsDeclared = false;

/** Loads host_experts.so (built beside the fatbins by build-kernels) once. */
export async function loadHostLaneLib(dir?: string): Promise<HostLaneLib> {
  if (cached && !dir) return cached;
  const dirs = dir ? [dir] : kernelDirCandidates();
  const path = dirs.map((d) => join(d, 'host_experts.so')).find((p) => existsSync(p));
  if (!path) throw new ResidencyError('NOT_AVAILABLE', `--host-experts: host_experts.so not found (looked in ${dirs.join(', ')}); run \`npm run build:kernels\` (needs a C compiler), or leave --host-experts out`);
  const koffi = (await import('koffi')) as unknown as { load(p: string): { func(proto: string): Fn }; struct(name: string, def: Record<string, unknown>): unknown };
  if (!structsDeclared) {
    koffi.struct('HeRow', HE_ROW_FIELDS(koffi.struct('HeMatrix', HE_MATRIX_FIELDS)));
    structsDeclared = true;
  }
  const lib = koffi.load(path);
  const f = {
    simd: lib.func('int he_simd_available()'),
    expert: lib.func('int he_expert(const uint8_t *row, const HeRow *layout, int H, int I, const float *x, _Out_ float *h, _Out_ float *y, int simd)'),
    start: lib.func('uint64_t he_start(int threads, int H, int I, int layers, int hot_rows, int cold_rows, int64_t row_bytes, const HeRow *layout, const uint64_t *cold, uint64_t mailbox, int simd, int flags)'),
    stop: lib.func('void he_stop(uint64_t lane)'),
    stats: lib.func('void he_stats(uint64_t lane, _Out_ uint64_t *out)'),
    laneSimd: lib.func('int he_lane_simd(uint64_t lane)'),
    address: lib.func('uint64_t he_address(const uint8_t *p)'),
  };
  const loaded: HostLaneLib = {
    path,
    simdAvailable: () => f.simd() === 1,
    expert(row, at, H, I, x, simd) {
      const h = new Float32Array(I), y = new Float32Array(H);
      const rc = f.expert(row, heRow(at, H, I), H, I, x, h, y, simd ? 1 : 0) as number;
      if (rc !== 0) throw new ResidencyError('BAD_ARGUMENT', `host experts: he_expert returned ${rc} (H ${H}, I ${I}, ${laneFormat(at)}, simd ${simd}: -1 no vector path here, -2 a layout or shape the lane does not compute: sizes not multiples of 8 (bf16), 16 (FP8) or 32 (MXFP4), a bad scale grid, or interleaved FP8 rows)`);
      return { h, y };
    },
    address: (buf) => BigInt(f.address(buf) as bigint | number),
    fns: { start: f.start, stop: f.stop, stats: f.stats, laneSimd: f.laneSimd },
  };
  if (!dir) cached = loaded;
  return loaded;
}

/** What the lane computes from: one layer's cold bank per MoE layer, rows of `rowBytes` laid out as `at` says. */
export interface HostLaneBanks {
  readonly hiddenSize: number;
  readonly intermediate: number;
  readonly layers: number;
  readonly hotRows: number;
  readonly coldRows: number;
  readonly rowBytes: number;
  readonly at: LaneRow;
  /** Host addresses of each MoE layer's cold bank. */
  readonly coldHost: readonly bigint[];
}

export interface HostLaneOptions {
  /** Threads (default: the CPUs this process may use, less 2). */
  readonly threads?: number;
  /** Pin thread i to one of the last CPUs (default on). */
  readonly pin?: boolean;
  /** Vector path where it applies (default on; off: the reference loop). */
  readonly simd?: boolean;
  /**
   * The next unit's rows are asked for into L2 a 512-byte group at a time while the one before is read (default on:
   * faster than no prefetch and than asking for a unit's rows at once; docs/results.md).
   */
  readonly prefetch?: boolean;
  /**
   * Of a layer's distinct cold experts at a decode step (of at most MAILBOX.maxPicks picks), the share the host
   * computes, rounded up to a part, each for every row that picked it: a fixed split. Absent: the split starts at
   * START_SHARE and follows the layers' measured times (host-lane/split.ts), updated every SPLIT_UPDATE_STEPS steps.
   */
  readonly share?: number;
  /**
   * The parts an expert counts in the split, 1..MAX_PARTS (default MAX_PARTS): 1 sends whole experts only; more lets
   * one expert a layer be split between the host and the GPU, in that many steps.
   */
  readonly parts?: number;
}

/** Default threads: all but two CPUs (the engine's thread and the driver's), at least one. */
export function defaultHostThreads(cpus = availableParallelism()): number {
  return Math.max(1, cpus - 2);
}

/**
 * What serve says of a thread count above the default (null: none): the lane's threads spin while decoding, so they
 * take the cores the engine's thread and the driver's need (more than the default ran slower: docs/results.md).
 */
export function hostThreadsNote(threads: number, cpus = availableParallelism()): string | null {
  const auto = defaultHostThreads(cpus);
  if (threads <= auto) return null;
  return `${threads} threads on ${cpus} CPUs leave the engine's thread and the driver's ${cpus - threads === 1 ? 'one CPU' : 'no CPU'} (auto: ${auto} thread${auto === 1 ? '' : 's'})`;
}

/** A running lane, its mailbox and the device state host_exchange.cuh keeps. dispose() stops the threads, then frees both. */
export class HostExpertLane {
  readonly mailboxDev: bigint;
  /** Device: HOST_STATE (host_exchange.cuh): the request's sequence number, the layer's host picks, the split table and the GPU's times. */
  readonly stateDev: bigint;
  readonly threads: number;
  readonly simd: boolean = false;
  /** Parts an expert counts in the split (1: whole experts only). */
  readonly parts: number;
  private readonly hidden: number;
  private readonly intermediate: number;
  private readonly mailbox: { host: Uint8Array; dev: bigint; hostPtr: bigint };
  private readonly words: DataView;
  private handle = 0n;
  private readonly scope = new ResourceScope('host expert lane');
  private readonly split: HostSplit;
  /** Pinned: the table going up at [0, 4 * 33), the GPU's statistics coming back at STATS_AT. */
  private readonly io: { host: Uint8Array; hostPtr: bigint };
  private readonly ioDone: bigint;
  private steps = 0;
  private statsInFlight = false;
  /** The GPU's cumulative counts at the last update ({layers, ns} pairs: the waits; {layers, ns, (ns / 1024)^2}: the cells). */
  private readonly seen = new Float64Array(STATS_BYTES / 8);

  constructor(private readonly lib: HostLaneLib, private readonly d: CudaDriver, banks: HostLaneBanks, opts: HostLaneOptions = {}) {
    const H = banks.hiddenSize;
    this.hidden = H;
    this.intermediate = banks.intermediate;
    const parts = checkParts(opts.parts ?? MAX_PARTS);
    this.parts = parts;
    this.threads = opts.threads ?? defaultHostThreads();
    const cpus = availableParallelism();
    if (!Number.isInteger(this.threads) || this.threads < 1 || this.threads > cpus) {
      // More spinning threads than CPUs would stall each other at every barrier (and the GPU waits on them).
      throw new ResidencyError('BAD_ARGUMENT', `--host-experts: threads must be an integer in 1..${cpus} (the CPUs this process may use), got ${opts.threads}`);
    }
    // Acquired in order, released in reverse (the threads first): a failed start leaves nothing behind.
    const scope = this.scope;
    try {
      this.mailbox = scope.acquire('host expert mailbox', () => d.allocMappedHost(MAILBOX.bytes(H, banks.intermediate), 'host expert mailbox'), (m) => d.freeHost(m.hostPtr));
      this.mailbox.host.fill(0);
      this.words = new DataView(this.mailbox.host.buffer, this.mailbox.host.byteOffset, this.mailbox.host.byteLength);
      this.mailboxDev = this.mailbox.dev;
      this.split = new HostSplit(MAX_PICKS, parts, opts.share);
      this.stateDev = scope.acquire('host expert state', () => d.alloc(4 * HOST_STATE.words, 'host expert state'), (p) => d.free(p));
      const state = new Int32Array(HOST_STATE.words);
      state[3] = -1; // no layer stamped yet
      state[HOST_STATE.splitGateUp] = state[HOST_STATE.splitDown] = -1; // no split expert
      state[HOST_STATE.parts] = parts;
      state.set(this.split.table(), HOST_STATE.take);
      d.htod(this.stateDev, state);
      this.io = scope.acquire('host expert split io', () => d.allocPinned(STATS_AT + STATS_BYTES, 'host expert split'), (h) => d.freeHost(h.hostPtr));
      this.ioDone = scope.acquire('host expert split event', () => d.eventCreate(), (e) => d.eventDestroy(e));
      const flags = (opts.pin === false ? 0 : 1) | (opts.prefetch === false ? 0 : 4);
      this.handle = scope.acquire('host expert threads', () => {
        const h = BigInt(lib.fns.start(this.threads, H, banks.intermediate, banks.layers, banks.hotRows, banks.coldRows, banks.rowBytes, heRow(banks.at, H, banks.intermediate),
          BigUint64Array.from(banks.coldHost), this.mailbox.hostPtr, opts.simd === false ? 0 : 1, flags) as bigint | number);
        if (!h) throw new ResidencyError('INTERNAL', `host experts: he_start refused (threads ${this.threads}, hidden ${H}, intermediate ${banks.intermediate}, ${banks.layers} layers, ${laneFormat(banks.at)} rows of ${banks.rowBytes} bytes: a matrix, scale grid or bias past the row's end, or a layout it does not compute)`);
        return h;
      }, (h) => lib.fns.stop(h));
      this.simd = lib.fns.laneSimd(this.handle) === 1;
    } catch (e) {
      throw scope.unwind(e);
    }
  }

  private live(): void {
    if (!this.handle) throw new ResidencyError('INTERNAL', 'host experts: the lane was used after dispose()');
  }

  /** Requests refused by the host (a slot, layer or pick count out of range, or no host pick: the outputs were zero) and waits the GPU gave up on. */
  faults(): { refused: number; gpuTimeouts: number } {
    this.live();
    return { refused: this.words.getInt32(MAILBOX.refused, true), gpuTimeouts: this.words.getUint32(MAILBOX.gpuTimeouts, true) };
  }

  /**
   * Throws when a request was refused or the GPU stopped waiting (the step's outputs are then wrong). The counts are
   * never reset: a lane that failed once fails every later step, so no wrong output passes unnoticed.
   */
  check(): void {
    const f = this.faults();
    if (f.refused || f.gpuTimeouts) {
      throw new ResidencyError('INTERNAL', `host experts: ${f.refused} request(s) refused (a bad slot, layer or pick count, or no pick for the host) and ${f.gpuTimeouts} GPU wait(s) timed out: the step's outputs are not valid`);
    }
  }

  /**
   * Posts a request from the host, as op_route_group posts one: for benchmarks and tests driving the lane without a
   * GPU. slots: each pick's physical slot, -1 for a pick the host does not compute; k picks a row (default all: one
   * row); x: the rows' inputs (rows x H floats; default: those already in the mailbox); split: the slot of an expert
   * among `slots` the host computes the first `units` units and `features` features of (the caller then plays the
   * GPU's side: units() holds the exchanged units, hostUnitsIn(seq) says when the host's are in, gpuUnitsIn(seq) hands
   * over the rest). Returns its sequence number; answered(seq) says when its outputs are in.
   */
  post(layer: number, slots: readonly number[], opts: { k?: number; x?: Float32Array; split?: { slot: number; units: number; features: number } } = {}): number {
    this.live();
    if (slots.length > MAILBOX.maxPicks) throw new ResidencyError('BAD_ARGUMENT', `host experts: post() takes at most ${MAILBOX.maxPicks} picks, got ${slots.length}`);
    if (opts.x && opts.x.length > MAILBOX.maxPicks * this.hidden) throw new ResidencyError('BAD_ARGUMENT', `host experts: post()'s x holds at most ${MAILBOX.maxPicks} rows of ${this.hidden}, got ${opts.x.length} values`);
    if (opts.x) new Float32Array(this.mailbox.host.buffer, this.mailbox.host.byteOffset + MAILBOX.x, opts.x.length).set(opts.x);
    this.words.setInt32(MAILBOX.layer, layer, true);
    this.words.setInt32(MAILBOX.n, slots.length, true);
    this.words.setInt32(MAILBOX.k, opts.k ?? slots.length, true);
    slots.forEach((s, j) => this.words.setInt32(MAILBOX.slots + 4 * j, s, true));
    this.words.setInt32(MAILBOX.splitSlot, opts.split?.slot ?? -1, true);
    this.words.setInt32(MAILBOX.splitUnits, opts.split?.units ?? 0, true);
    this.words.setInt32(MAILBOX.splitFeatures, opts.split?.features ?? 0, true);
    const seq = (this.words.getUint32(MAILBOX.reqSeq, true) + 1) >>> 0;
    this.words.setUint32(MAILBOX.reqSeq, seq, true);
    return seq;
  }

  answered(seq: number): boolean {
    this.live();
    return this.words.getUint32(MAILBOX.doneSeq, true) === seq;
  }

  /** The mailbox's exchange of a split expert's units: maxPicks rows of I floats, pick p's at row p (for post()'s callers). */
  units(): Float32Array {
    this.live();
    return new Float32Array(this.mailbox.host.buffer, this.mailbox.host.byteOffset + MAILBOX.act(this.hidden), MAILBOX.maxPicks * this.intermediate);
  }

  /** Whether the host's units of request seq's split expert are in units(). */
  hostUnitsIn(seq: number): boolean {
    this.live();
    return this.words.getUint32(MAILBOX.hostActSeq, true) === seq;
  }

  /** Says the GPU's units of request seq's split expert are in units() (what op_host_exchange does). */
  gpuUnitsIn(seq: number): void {
    this.live();
    this.words.setUint32(MAILBOX.gpuActSeq, seq, true);
  }

  /** Requests answered and the threads' busy time since the start; the split and the times it was chosen from. */
  stats(): { requests: number; busyMs: number; split: SplitReport } {
    this.live();
    const out = new BigUint64Array(2);
    this.lib.fns.stats(this.handle, out);
    return { requests: Number(out[0]), busyMs: Number(out[1]) / 1e6, split: this.split.report() };
  }

  /**
   * Called by the backend before each step it queues on `stream`: every SPLIT_UPDATE_STEPS steps it takes in what the
   * GPU measured since the last time (the GPU's counts, copied back then, have landed once that copy's event has),
   * moves the split toward what measured fastest and queues the new table (ahead of this step's kernels) and the next
   * copy of the GPU's counts.
   */
  tune(stream: bigint): void {
    this.live();
    if (++this.steps % SPLIT_UPDATE_STEPS) return;
    if (this.statsInFlight) {
      this.d.eventSync(this.ioDone); // queued SPLIT_UPDATE_STEPS steps ago: long done
      const now = Float64Array.from(new BigUint64Array(this.io.host.buffer, this.io.host.byteOffset + STATS_AT, STATS_BYTES / 8), Number);
      const d = now.map((v, i) => v - this.seen[i]!);
      this.seen.set(now);
      const column = (from: number, stride: number, count: number) => Float64Array.from({ length: count }, (_, i) => d[from + stride * i]!);
      const at = (HOST_STATE.cells - HOST_STATE.waitStats) / 2, stride = HOST_STATE.cellWords / 2, count = (MAX_PICKS + 1) * (MAX_PARTS * MAX_PICKS + 1);
      const cells: SplitCells = { n: column(at, stride, count), ns: column(at + 1, stride, count), sq: column(at + 2, stride, count) };
      const changed = this.split.update(cells, { n: d[0]!, ns: d[1]! }, { n: d[2]!, ns: d[3]! });
      if (changed) {
        new Int32Array(this.io.host.buffer, this.io.host.byteOffset, MAX_PICKS + 1).set(this.split.table());
        this.d.htodAsync(this.stateDev + BigInt(4 * HOST_STATE.take), this.io.hostPtr, 4 * (MAX_PICKS + 1), stream);
      }
    }
    this.d.dtohAsync(this.io.hostPtr + BigInt(STATS_AT), this.stateDev + BigInt(4 * HOST_STATE.waitStats), STATS_BYTES, stream);
    this.d.eventRecord(this.ioDone, stream);
    this.statsInFlight = true;
  }

  dispose(): void {
    if (!this.handle) return;
    this.handle = 0n;
    this.scope.close();
  }
}

/** Where the GPU's counts land in the split's pinned buffer, and their bytes (the waits and the cells, uint64). */
const STATS_AT = 256;
const STATS_BYTES = 4 * (HOST_STATE.words - HOST_STATE.waitStats);

/** The lane as a backend option: the loaded library and how it runs. */
export interface HostExpertsOptions extends HostLaneOptions {
  readonly lib: HostLaneLib;
}

/**
 * Why the lane cannot compute this model's experts (null: it can): rows it cannot read (lane-row.ts, laneRowRefusal), or
 * more picks a token than a request carries.
 */
export function hostLaneRefusal(spec: ModelSpec, row: ExpertRowLayout): string | null {
  const refusal = laneRowRefusal(spec, row);
  if (refusal) return refusal;
  if (spec.topK > MAX_PICKS) return `it picks ${spec.topK} experts a token (a request carries ${MAX_PICKS} picks)`;
  return null;
}
