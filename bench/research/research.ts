// What the policy-research benchmarks (noise.ts, prior.ts, forget.ts) share: the four setups (fixture 6x64/49
// replayed by the simulator, tiered 16x384/295 on the CPU cost-model executor, each at 1 and 4 users), their
// traffic, one run of a policy on a setup, the after-shift figures, churn counting, and the frozen-Controller
// swap queue the hand-made rules decide into. Runs nothing at import: those three run their whole benchmark
// at import, so the shared pieces live here.
import type { Controller } from '../../src/residency/controller.ts';
import { decideSwaps, type Budgets, type Swap } from '../../src/residency/policy.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';
import { phaseMetrics, type PhaseMetrics } from '../../src/sim/metrics.ts';
import type { Geometry, PolicyFactory } from '../../src/sim/policies/policy.ts';
import { replay, type ReplayResult } from '../../src/sim/replay.ts';
import { domainsOf, fitOn } from '../../src/sim/setup.ts';
import type { TraceSet } from '../../src/sim/traces/trace.ts';
import { buildTraffic, parsePhases, type SimStep } from '../../src/sim/traffic.ts';
import { CpuCostExecutor } from './executor.ts';
import { BIG } from './geometry.ts';
import { runTiered, type PlacementMode, type TieredRun } from './harness.ts';

export interface Setup {
  readonly geometry: string;
  readonly users: number;
  readonly g: Geometry;
  /** The traces the traffic, boot map and reference maps are built from. */
  readonly set: TraceSet;
  readonly phases: string;
  readonly base: Partial<Budgets>;
  readonly tiered: boolean;
}

/** main.ts's hand-set budgets for the tiered geometry (decided before the copy-cost gate: it stays off, so they reproduce). */
export const TIERED_BASE: Partial<Budgets> = { drain_every: 16, half_life_tokens: 150, swaps_per_layer_per_drain: 4, min_average: 2, swaps_per_step: 8, hysteresis: 1.5, move_cost_picks: 0 };
/** The fixture's 6 x 64 with 49 hot (bench:sim's shift). */
export const fixtureGeometry = (set: TraceSet): Geometry => ({ layers: set.layers, experts: set.experts, topK: set.topK, hotPerLayer: 49 });
export const TIERED_GEOMETRY: Geometry = { layers: BIG.layers, experts: BIG.experts, topK: BIG.topK, hotPerLayer: BIG.hotPerLayer };

/**
 * The four setups, shift protocol en+code -> de+ja -> en+code: fixture (`fixtureSteps` a phase, default
 * budgets) at 1 and 4 users, tiered (1000 / 800 steps a phase, TIERED_BASE) at 1 and 4 users. `extra` adds
 * per-geometry fields (prior.ts: its prior's counts).
 */
export function researchSetups<X extends object = object>(
  fix: TraceSet, big: TraceSet, fixtureSteps = 3000, extra?: { fixture: X; tiered: X },
): Array<Setup & X> {
  const fixG = fixtureGeometry(fix);
  const f = fixtureSteps;
  const fx = (extra?.fixture ?? {}) as X;
  const tx = (extra?.tiered ?? {}) as X;
  return [
    ...[1, 4].map((users) => ({ geometry: 'fixture 6x64/49', users, g: fixG, set: fix, phases: `en+code:${f},de+ja:${f},en+code:${f}`, base: {}, tiered: false, ...fx })),
    { geometry: 'tiered 16x384/295', users: 1, g: TIERED_GEOMETRY, set: big, phases: 'en+code:1000,de+ja:1000,en+code:1000', base: TIERED_BASE, tiered: true, ...tx },
    { geometry: 'tiered 16x384/295', users: 4, g: TIERED_GEOMETRY, set: big, phases: 'en+code:800,de+ja:800,en+code:800', base: TIERED_BASE, tiered: true, ...tx },
  ];
}

/**
 * Runs policies on setups: the traffic of each (setup, seed) built once, boot map fitted on en+code (named
 * `model`), and ONE CPU cost-model executor for every tiered run (its clock carries over between runs, so
 * a bench's figures depend on its run order, as before this module).
 */
export class Lab {
  readonly exec = new CpuCostExecutor(BIG);
  private readonly cache = new Map<string, { steps: SimStep[]; boot: RowMap }>();
  constructor(private readonly model: string) {}

  traffic(s: Setup, seed: number): { steps: SimStep[]; boot: RowMap } {
    const key = `${s.geometry}/${s.users}/${seed}`;
    let t = this.cache.get(key);
    if (!t) {
      const phases = parsePhases(s.phases, s.set);
      t = { steps: buildTraffic(s.set, { phases, users: s.users, seed, countTmax: 256 }), boot: fitOn(s.set, s.g, domainsOf('en+code', s.set), this.model) };
      this.cache.set(key, t);
    }
    return t;
  }

  /** One run: the tiered harness on the cost model (`run` set), or the simulator's replay (fixture). */
  run(s: Setup, seed: number, factory: PolicyFactory, mode: PlacementMode, count = false): { replay: ReplayResult; run: TieredRun | null } {
    const { steps, boot } = this.traffic(s, seed);
    if (s.tiered) {
      const run = runTiered('x', factory, this.exec, { geometry: BIG, bootMap: boot, steps, users: s.users, count, mode });
      return { replay: run.replay, run };
    }
    return { replay: replay(factory({ geometry: s.g, bootMap: boot, steps }), steps), run: null };
  }

  phases(s: Setup, seed: number, factory: PolicyFactory, mode: PlacementMode, count = false): PhaseMetrics[] {
    return phaseMetrics(this.run(s, seed, factory, mode, count).replay);
  }
}

/** The figures after the shift (3 phases): converged and T90 of phases 2-3, swaps per phase, the boot phase's converged. */
export interface AfterShift { convergedAfter: number; t90: Array<number | null>; swaps: number; boot: number }
export const afterShift = (m: PhaseMetrics[]): AfterShift => ({
  convergedAfter: (m[1]!.converged + m[2]!.converged) / 2,
  t90: m.slice(1).map((p) => p.t90Steps),
  swaps: m.slice(1).reduce((a, p) => a + p.swaps, 0) / 2,
  boot: m[0]!.converged,
});

export const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
export const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
/** Steps of the shifted phase (phase 2). */
export const phaseLen = (s: Setup) => parsePhases(s.phases, s.set)[1]!.steps;

export interface Churn { swaps: number; outAgain: number; backAgain: number }
/** Swaps (from step `from` on) whose incoming expert leaves again / whose evicted expert returns within `window` steps. */
export function churnOf(log: ReadonlyArray<{ step: number; swap: Swap }>, window: number, from: number): Churn {
  const c: Churn = { swaps: 0, outAgain: 0, backAgain: 0 };
  for (let i = 0; i < log.length; i++) {
    const { step, swap } = log[i]!;
    if (step < from) continue;
    c.swaps++;
    let out = false; let back = false;
    for (let j = i + 1; j < log.length && log[j]!.step - step <= window; j++) {
      const s = log[j]!.swap;
      if (s.layer !== swap.layer) continue;
      if (s.hotExpert === swap.coldExpert) out = true;
      if (s.coldExpert === swap.hotExpert) back = true;
    }
    if (out) c.outAgain++;
    if (back) c.backAgain++;
  }
  return c;
}

/**
 * The decisions of a frozen Controller taken outside it (prior.ts's priorAdaptive, forget.ts's memoryAdaptive):
 * decideSwaps on the caller's scores, queued and applied as Controller.drain/applySwaps do (queued experts
 * left out, at most swaps_per_step a step, stale-checked), mirrored into the controller's map by exchangeRows
 * and into the policy's hot mask.
 */
export class SwapQueue {
  private readonly queued: Uint32Array;
  private readonly queue: Swap[] = [];
  // The map as the decisions see it (the controller's own copy follows through exchangeRows).
  private readonly hotRows: number[][];
  private readonly coldRows: number[][];
  private readonly view: RowMap;

  constructor(private readonly controller: Controller, private readonly hot: Uint8Array, private readonly experts: number) {
    this.queued = new Uint32Array(hot.length);
    const boot = controller.map();
    this.hotRows = boot.layers_map.map((r) => [...r.hot]);
    this.coldRows = boot.layers_map.map((r) => [...r.cold]);
    const coldRows = this.coldRows;
    this.view = { ...boot, layers_map: this.hotRows.map((h, l) => ({ hot: h, cold: coldRows[l]! })) };
  }

  private mark(s: Swap, d: number): void {
    const E = this.experts;
    this.queued[s.layer * E + s.hotExpert]! += d;
    this.queued[s.layer * E + s.coldExpert]! += d;
  }

  /** Queues what decideSwaps picks on `scores` [layer * experts + expert] at this drain. */
  decide(scores: Float64Array, budgets: Budgets, step: number): void {
    for (const s of decideSwaps(this.view, scores, budgets, step, this.queued)) { this.queue.push(s); this.mark(s, 1); }
  }

  /** Applies up to `max` queued swaps still valid (stale ones are refused); `applied` sees each one applied. */
  apply(max: number, appliedSwap?: (s: Swap) => void): { applied: number; refused: number } {
    const E = this.experts;
    let applied = 0;
    let refused = 0;
    while (applied < max && this.queue.length > 0) {
      const s = this.queue.shift()!;
      this.mark(s, -1);
      const h = this.hotRows[s.layer]!;
      const c = this.coldRows[s.layer]!;
      if (h[s.hotRow] !== s.hotExpert || c[s.coldRow] !== s.coldExpert) { refused++; continue; }
      this.controller.exchangeRows(s.layer, s.hotRow, s.coldRow);
      h[s.hotRow] = s.coldExpert;
      c[s.coldRow] = s.hotExpert;
      this.hot[s.layer * E + s.hotExpert] = 0;
      this.hot[s.layer * E + s.coldExpert] = 1;
      appliedSwap?.(s);
      applied++;
    }
    return { applied, refused };
  }
}
