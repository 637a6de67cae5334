// The controller: drain counts into an EWMA, decide swaps, queue them, apply them stale-checked, obey control.
import { ResidencyError } from '../errors.ts';
import { countDelta, toRows, type CountSnapshot, type CountsDump } from './counts.ts';
import { DEFAULT_BUDGETS, decideSwaps, parseBudgets, foldWindow, priorScores, priorShares, type Budgets, type Swap } from './policy.ts';
import { assertRowMap, cloneRowMap, type RowMap } from './rowmap.ts';
import { planRestore } from './restore.ts';
import { parseControl, type ControlCommand, type ControlResult } from './control.ts';

export interface ControllerOptions {
  /** The map the banks hold at start; restore_map returns to it. */
  readonly boot: RowMap;
  readonly budgets?: Partial<Budgets>;
  /** Boot frozen (count only) unless told otherwise: adaptation starts on a GO signal. Default true. */
  readonly frozen?: boolean;
  /** Default true. */
  readonly counting?: boolean;
  /** The counter's value when the controller starts (default: all zero, a fresh counter). */
  readonly initialSnapshot?: CountSnapshot;
  /**
   * A seed prior: cumulative pick counts laid out [layer * experts + expert] (a counts dump's table, e.g.
   * `flattenCounts(dump.cumulative)`). When given and budgets.prior_picks_per_expert > 0, swaps are decided on
   * decayed + prior_picks_per_expert x E x the expert's share of its layer's prior picks.
   */
  readonly prior?: ArrayLike<number>;
}

/** What one engine (or simulated) step tells the controller. */
export interface StepInfo {
  readonly step: number;
  readonly tokens: number;
  /** Whether its picks went into the counter (the controller's shouldCount said so). */
  readonly counted: boolean;
}

/** The result of one drain: what the window saw, and what was decided. Plain data (telemetry builds on it). */
export interface DrainReport {
  readonly step: number;
  /** Steps and tokens since the previous drain. */
  readonly steps: number;
  readonly tokens: number;
  readonly countedSteps: number;
  /** Tokens of the counted steps: what the EWMA aged by at this drain. */
  readonly countedTokens: number;
  /** Picks counted in the window, and those that landed on cold experts under the map at drain time. */
  readonly picks: number;
  readonly coldPicks: number;
  /** coldPicks / picks (0 when nothing was counted). */
  readonly coldShare: number;
  readonly coldShareByLayer: readonly number[];
  readonly decided: readonly Swap[];
  /** Swaps applied and refused (stale) since the previous drain. */
  readonly applied: number;
  readonly refused: number;
  /** Swaps of the previous drains' plans the banks never started, dropped here and decided again. */
  readonly superseded: number;
  /** Swaps waiting after this drain's decisions were queued. */
  readonly queueDepth: number;
  readonly frozen: boolean;
}

export interface ApplyReport {
  readonly applied: readonly Swap[];
  /** Stale at apply time: a row no longer held the expert the decision named. */
  readonly refused: readonly Swap[];
}

export interface TickReport extends ApplyReport {
  readonly drain?: DrainReport;
}

export interface ControllerStats {
  drains: number;
  /** Swaps decided (one decided again at a later drain, see `superseded`, counts again). */
  decided: number;
  applied: number;
  refused: number;
  /** Queued swaps dropped by freeze or restore before they were applied. */
  cancelled: number;
  /** Queued swaps a later drain decided again before they were requested (dropped; that drain's decisions replace them). */
  superseded: number;
}

/**
 * The live engine calls it with periodic counter snapshots, the simulator with its host Counter; both
 * drive the same object, so a decision in simulation is a decision in production. Per step:
 *
 *   const counted = ctl.shouldCount(tokens);          // count
 *   ... run the step, counting picks if `counted` ...
 *   ctl.tick({ step, tokens, counted }, readCounter,   // drain when due, decide,
 *            (swap) => banks.swapRows(swap.layer, swap.hotRow, swap.coldRow));  // swap (<= swaps_per_step)
 *
 * The controller's map copy is the truth for decisions; a swap whose rows no longer hold the experts it
 * was decided for is refused at apply time and counted. Pure: no I/O, no clock, no device.
 */
export class Controller {
  readonly model: string;
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  readonly boot: RowMap;
  readonly stats: ControllerStats = { drains: 0, decided: 0, applied: 0, refused: 0, cancelled: 0, superseded: 0 };

  private budgetsNow: Budgets;
  private frozenNow: boolean;
  private countingNow: boolean;
  private readonly hot: number[][];
  private readonly cold: number[][];
  /** slot[layer * experts + expert], the banks' convention: hot row, or hot_per_layer + cold row. */
  private readonly slots: Int32Array;
  private readonly decayed: Float64Array;
  /** The prior as per-layer shares (mean 1), and the scratch the scores are built in (reused every drain). */
  private readonly prior: Float64Array | undefined;
  private readonly scores: Float64Array | undefined;
  private readonly cumulative: Float64Array;
  private readonly prev: CountSnapshot;
  private readonly delta: Uint32Array;
  private queue: Swap[] = [];
  /** Requested from background-moving banks, not landed yet (see requestSwaps). */
  private inFlight: Swap[] = [];
  /** Queued swaps naming each expert: the policy leaves those experts alone so queued swaps never conflict. */
  private readonly queued: Uint32Array;
  private discardNextWindow = false;
  /** The layer after the last swap started: where equal-gain decisions start (decideSwaps' firstLayer). */
  private nextLayer = 0;
  private lastStep = -1;
  private decodeSteps = 0;
  private window = { steps: 0, tokens: 0, countedSteps: 0, countedTokens: 0, applied: 0, refused: 0 };

  constructor(opts: ControllerOptions) {
    assertRowMap(opts.boot);
    this.boot = cloneRowMap(opts.boot);
    this.model = opts.boot.model;
    this.layers = opts.boot.layers;
    this.experts = opts.boot.experts;
    this.hotPerLayer = opts.boot.hot_per_layer;
    this.budgetsNow = Object.freeze({ ...DEFAULT_BUDGETS, ...parseBudgets(opts.budgets ?? {}, 'budgets') });
    this.frozenNow = opts.frozen ?? true;
    this.countingNow = opts.counting ?? true;
    this.hot = opts.boot.layers_map.map((r) => [...r.hot]);
    this.cold = opts.boot.layers_map.map((r) => [...r.cold]);
    const n = this.layers * this.experts;
    this.slots = new Int32Array(n);
    for (let l = 0; l < this.layers; l++) {
      this.hot[l]!.forEach((e, r) => { this.slots[l * this.experts + e] = r; });
      this.cold[l]!.forEach((e, c) => { this.slots[l * this.experts + e] = this.hotPerLayer + c; });
    }
    this.decayed = new Float64Array(n);
    if (opts.prior !== undefined) {
      this.prior = priorShares(opts.prior, this.layers, this.experts);
      this.scores = new Float64Array(n);
    }
    this.cumulative = new Float64Array(n);
    this.queued = new Uint32Array(n);
    this.prev = opts.initialSnapshot ? opts.initialSnapshot.slice() : new Uint32Array(n);
    this.delta = new Uint32Array(n);
    if (this.prev.length !== n) throw new ResidencyError('BAD_COUNTS', `initial snapshot holds ${this.prev.length} counts, expected ${n}`);
  }

  get budgets(): Budgets { return this.budgetsNow; }
  get frozen(): boolean { return this.frozenNow; }
  get counting(): boolean { return this.countingNow; }
  get queueDepth(): number { return this.queue.length; }
  /** Whether a seed prior was given (it is used while budgets.prior_picks_per_expert > 0). */
  get hasPrior(): boolean { return this.prior !== undefined; }

  /** The map as the controller knows it (a copy). */
  map(): RowMap {
    return {
      version: 1, model: this.model, layers: this.layers, experts: this.experts, hot_per_layer: this.hotPerLayer,
      layers_map: this.hot.map((h, l) => ({ hot: [...h], cold: [...this.cold[l]!] })),
    };
  }

  slotOf(layer: number, expert: number): number { return this.slots[layer * this.experts + expert]!; }
  isHot(layer: number, expert: number): boolean { return this.slotOf(layer, expert) < this.hotPerLayer; }

  /** Count this step? Counting on, and at most count_tmax tokens (prefill chunks are noise). */
  shouldCount(tokens: number): boolean {
    return this.countingNow && tokens > 0 && tokens <= this.budgetsNow.count_tmax;
  }

  /** Records that a step ran (its tokens join the window; the EWMA ages by the counted ones). */
  onStep(info: StepInfo): void {
    this.lastStep = info.step;
    this.window.steps++;
    this.window.tokens += info.tokens;
    if (info.counted) { this.window.countedSteps++; this.window.countedTokens += info.tokens; this.decodeSteps++; }
  }

  drainDue(): boolean { return this.window.steps >= this.budgetsNow.drain_every; }

  /** Folds the counts since the last drain into the EWMA and, unless frozen, decides and queues swaps. */
  drain(step: number, snapshot: CountSnapshot): DrainReport {
    // Reused buffers: a drain allocates nothing per expert (no GC pauses on the step that drains).
    const delta = countDelta(this.prev, snapshot, this.delta);
    this.prev.set(snapshot);
    const w = this.window;
    const { experts: E, hotPerLayer: H, slots, cumulative } = this;
    const fold = !this.discardNextWindow;
    let picks = 0;
    let coldPicks = 0;
    const coldShareByLayer: number[] = [];
    for (let l = 0; l < this.layers; l++) {
      let lp = 0;
      let lc = 0;
      for (let i = l * E; i < (l + 1) * E; i++) {
        const d = delta[i]!;
        lp += d;
        if (slots[i]! >= H) lc += d;
        if (fold) cumulative[i]! += d;
      }
      picks += lp;
      coldPicks += lc;
      coldShareByLayer.push(lp > 0 ? lc / lp : 0);
    }
    // A baseline asked without a counter snapshot leaves a window that straddles it: none of it is used.
    // The EWMA ages by the tokens whose picks were counted: the same number of picks per half-life at any batch size,
    // and a prefill step (not counted) ages nothing.
    if (fold) foldWindow(this.decayed, delta, w.countedTokens, this.budgetsNow.half_life_tokens);
    this.discardNextWindow = false;
    // Swaps still queued from an earlier drain are decided again on these counts, not kept: where the banks move
    // rows slower than the policy decides (background copies at batch > 1), a queue kept across drains fills
    // with exchanges whose counts are long gone (bench/tiered, mixed traffic at 4 users). Swaps already requested
    // from the banks (in flight) are not touched.
    const superseded = this.frozenNow ? 0 : this.cancel((s) => s.reason === 'adapt', 'superseded');
    const decided = this.frozenNow
      ? []
      : decideSwaps(this.mapView(), this.decisionScores(), this.budgetsNow, step, this.queued, this.nextLayer);
    for (const s of decided) this.enqueue(s);
    this.stats.drains++;
    this.stats.decided += decided.length;
    const report: DrainReport = {
      step, steps: w.steps, tokens: w.tokens, countedSteps: w.countedSteps, countedTokens: w.countedTokens, picks, coldPicks,
      coldShare: picks > 0 ? coldPicks / picks : 0, coldShareByLayer, decided,
      applied: w.applied, refused: w.refused, superseded, queueDepth: this.queue.length, frozen: this.frozenNow,
    };
    this.window = { steps: 0, tokens: 0, countedSteps: 0, countedTokens: 0, applied: 0, refused: 0 };
    return report;
  }

  /**
   * Applies up to `max` queued swaps in order. Each is checked against the controller's map first and
   * refused if either row no longer holds the decided expert (refusals cost no budget). `exchange`
   * performs the row exchange (the engine: banks.swapRows); if it throws, the map is left unchanged and
   * the error propagates.
   */
  applySwaps(max: number, exchange?: (swap: Swap) => void): ApplyReport {
    const applied: Swap[] = [];
    const refused: Swap[] = [];
    while (applied.length < max && this.queue.length > 0) {
      const s = this.queue.shift()!;
      this.unmark(s);
      if (this.hot[s.layer]![s.hotRow] !== s.hotExpert || this.cold[s.layer]![s.coldRow] !== s.coldExpert) {
        refused.push(s);
        continue;
      }
      exchange?.(s);
      this.exchangeInMap(s.layer, s.hotRow, s.coldRow);
      applied.push(s);
      this.nextLayer = (s.layer + 1) % this.layers;
    }
    this.stats.applied += applied.length;
    this.stats.refused += refused.length;
    this.window.applied += applied.length;
    this.window.refused += refused.length;
    return { applied, refused };
  }

  /**
   * For banks that move rows in the background: starts up to `max` queued swaps in order, each checked
   * against the controller's map first (a stale one is refused, costing no budget). `request` starts the
   * bank's exchange (banks.requestSwap); the map follows when the bank reports it landed (`land`). Until
   * then both experts stay marked, so no decision names them. Restore swaps wait until nothing is in flight
   * (their plan was made for the map the moves in flight leave).
   */
  requestSwaps(max: number, request: (swap: Swap) => void): ApplyReport {
    const started: Swap[] = [];
    const refused: Swap[] = [];
    while (started.length < max && this.queue.length > 0) {
      const s = this.queue[0]!;
      if (s.reason === 'restore' && this.inFlight.some((f) => f.reason !== 'restore')) break;
      // A swap on a row that is still moving waits for it to land (a restore plan chains swaps through rows).
      if (this.inFlight.some((f) => f.layer === s.layer && (f.hotRow === s.hotRow || f.coldRow === s.coldRow))) break;
      this.queue.shift();
      if (this.hot[s.layer]![s.hotRow] !== s.hotExpert || this.cold[s.layer]![s.coldRow] !== s.coldExpert) {
        this.unmark(s);
        refused.push(s);
        continue;
      }
      request(s);
      this.inFlight.push(s);
      started.push(s);
      this.nextLayer = (s.layer + 1) % this.layers;
    }
    this.stats.refused += refused.length;
    this.window.refused += refused.length;
    return { applied: started, refused };
  }

  /** A requested swap landed in the banks: the map follows. Returns it (INTERNAL if nothing was in flight there). */
  land(layer: number, hotRow: number, coldRow: number): Swap {
    const i = this.inFlight.findIndex((f) => f.layer === layer && f.hotRow === hotRow && f.coldRow === coldRow);
    if (i < 0) throw new ResidencyError('INTERNAL', `land: no swap in flight at layer ${layer} hot row ${hotRow} cold row ${coldRow}`);
    const [s] = this.inFlight.splice(i, 1);
    this.unmark(s!);
    this.exchangeInMap(layer, hotRow, coldRow);
    this.stats.applied++;
    this.window.applied++;
    return s!;
  }

  /** Swaps requested from the banks and not landed yet. */
  get inFlightCount(): number { return this.inFlight.length; }

  /** One step's worth of residency work: note the step, drain when due, apply at most swaps_per_step. */
  tick(info: StepInfo, readCounter: () => CountSnapshot, exchange?: (swap: Swap) => void): TickReport {
    this.onStep(info);
    const drain = this.drainDue() ? this.drain(info.step, readCounter()) : undefined;
    const { applied, refused } = this.applySwaps(this.budgetsNow.swaps_per_step, exchange);
    return drain ? { drain, applied, refused } : { applied, refused };
  }

  /**
   * A row exchange made outside the queue (a manual placement; tests). The map follows it; queued swaps
   * that named these rows' old experts will be refused as stale.
   */
  exchangeRows(layer: number, hotRow: number, coldRow: number): void {
    if (hotRow < 0 || hotRow >= this.hotPerLayer || coldRow < 0 || coldRow >= this.experts - this.hotPerLayer) {
      throw new ResidencyError('BAD_ARGUMENT', `exchangeRows: rows ${hotRow}/${coldRow} out of range`);
    }
    this.exchangeInMap(layer, hotRow, coldRow);
  }

  /**
   * Applies a control command atomically: validated first (a rejected command changes nothing), then
   * dump_counts (the state before this command), budgets, counting, freeze, baseline, restore_map.
   * `snapshot` (the counter now) lets a baseline start the window exactly here; without it the window in
   * progress is discarded at the next drain.
   */
  control(cmd: ControlCommand, snapshot?: CountSnapshot): ControlResult {
    const parsed = parseControl(cmd);
    if (!parsed.ok) return parsed;
    const c = parsed.command;
    if (snapshot && snapshot.length !== this.prev.length) {
      return { ok: false, error: `snapshot: ${snapshot.length} counts, expected ${this.prev.length}` };
    }
    const changes: string[] = [];
    const dump = c.dump_counts !== undefined ? { path: c.dump_counts, counts: this.dumpCounts() } : undefined;
    if (dump) changes.push(`dump_counts -> ${dump.path}`);
    if (c.budgets) {
      this.budgetsNow = Object.freeze({ ...this.budgetsNow, ...definedOnly(c.budgets) });
      changes.push(`budgets ${JSON.stringify(c.budgets)}`);
    }
    if (c.counting !== undefined && c.counting !== this.countingNow) {
      this.countingNow = c.counting;
      changes.push(`counting ${c.counting ? 'on' : 'off'}`);
    }
    if (c.freeze !== undefined && c.freeze !== this.frozenNow) {
      this.frozenNow = c.freeze;
      if (c.freeze) changes.push(`frozen, ${this.cancel((s) => s.reason === 'adapt')} queued swaps cancelled`);
      else changes.push('adapting');
    }
    if (c.baseline) {
      this.decayed.fill(0);
      if (snapshot) this.prev.set(snapshot);
      else this.discardNextWindow = true;
      this.window = { ...this.window, steps: 0, tokens: 0, countedSteps: 0, countedTokens: 0 };
      changes.push('baseline: EWMA and window reset');
    }
    if (c.restore_map) {
      this.frozenNow = true;
      const cancelled = this.cancel(() => true);
      const plan = planRestore(this.mapAfterInFlight(), this.boot, Math.max(0, this.lastStep));
      for (const s of plan) this.enqueue(s);
      changes.push(`restore_map: frozen, ${cancelled} queued swaps cancelled, ${plan.length} restore swaps queued`);
    }
    return dump ? { ok: true, changes, dump } : { ok: true, changes };
  }

  /** The counts dump (format v1): decayed counts as of the last drain, cumulative counts since start. */
  dumpCounts(): CountsDump {
    return {
      version: 1, model: this.model, step: Math.max(0, this.lastStep), decode_steps: this.decodeSteps,
      half_life: this.budgetsNow.half_life_tokens,
      decayed: toRows(this.decayed, this.layers, this.experts, true),
      cumulative: toRows(this.cumulative, this.layers, this.experts),
    };
  }

  /** Decayed pick count of one expert (see foldWindow for the units). */
  decayedCount(layer: number, expert: number): number { return this.decayed[layer * this.experts + expert]!; }

  /** The queued swaps, oldest first (a copy). */
  pending(): Swap[] { return [...this.queue]; }

  /** What decideSwaps ranks: the decayed counts, plus the prior's pseudo-picks when there is one and w > 0. */
  private decisionScores(): Float64Array {
    const w = this.budgetsNow.prior_picks_per_expert;
    if (this.prior === undefined || this.scores === undefined || !(w > 0)) return this.decayed;
    return priorScores(this.prior, w, this.decayed, this.scores);
  }

  private mapView(): RowMap {
    return {
      version: 1, model: this.model, layers: this.layers, experts: this.experts, hot_per_layer: this.hotPerLayer,
      layers_map: this.hot.map((h, l) => ({ hot: h, cold: this.cold[l]! })),
    };
  }

  /** The map once every swap in flight has landed (what a restore plan starts from). */
  private mapAfterInFlight(): RowMap {
    const m = this.map();
    for (const f of this.inFlight) {
      const rows = m.layers_map[f.layer]! as { hot: number[]; cold: number[] };
      [rows.hot[f.hotRow], rows.cold[f.coldRow]] = [rows.cold[f.coldRow]!, rows.hot[f.hotRow]!];
    }
    return m;
  }

  private enqueue(s: Swap): void {
    this.queue.push(s);
    this.queued[s.layer * this.experts + s.hotExpert]!++;
    this.queued[s.layer * this.experts + s.coldExpert]!++;
  }

  private unmark(s: Swap): void {
    this.queued[s.layer * this.experts + s.hotExpert]!--;
    this.queued[s.layer * this.experts + s.coldExpert]!--;
  }

  private cancel(which: (s: Swap) => boolean, stat: 'cancelled' | 'superseded' = 'cancelled'): number {
    const keep: Swap[] = [];
    let n = 0;
    for (const s of this.queue) {
      if (which(s)) {
        n++;
        this.unmark(s);
      } else keep.push(s);
    }
    this.queue = keep;
    this.stats[stat] += n;
    return n;
  }

  private exchangeInMap(layer: number, hotRow: number, coldRow: number): void {
    const h = this.hot[layer]!;
    const c = this.cold[layer]!;
    const a = h[hotRow]!;
    const b = c[coldRow]!;
    h[hotRow] = b;
    c[coldRow] = a;
    this.slots[layer * this.experts + b] = hotRow;
    this.slots[layer * this.experts + a] = this.hotPerLayer + coldRow;
  }
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
