// Drives one policy over a step stream on an executor: per step, carry out the policy's moves as row
// exchanges (rows.ts) or host-mirror copies (mirror-rows.ts, geometry.moves 'mirror'), run the step's expert kernels against the slot table, then let the policy see the
// step (the simulator's Policy, so adaptive is the real Controller). Records what each step read and cost.
import type { RowMap } from '../../src/residency/rowmap.ts';
import type { Policy, PolicyFactory } from '../../src/sim/policies/policy.ts';
import type { ReplayResult } from '../../src/sim/replay.ts';
import type { SimStep } from '../../src/sim/traffic.ts';
import type { TieredExecutor } from './executor.ts';
import type { TieredGeometry } from './geometry.ts';
import { newPlan, planStep } from './plan.ts';
import { movesInFlight, moveMode } from './geometry.ts';
import { MirrorRowTable } from './mirror-rows.ts';
import { allHotSlots, RowTable, type RowPlacement } from './rows.ts';

export type PlacementMode = 'exchange' | 'free' | 'all-hot';

export interface TieredRun {
  readonly policy: string;
  readonly steps: number;
  readonly phase: Uint16Array;
  readonly stepMs: Float64Array;
  readonly countMs: Float64Array;
  /** Picks read from the cold bank (host memory) in the step, and all picks. */
  readonly coldPicks: Uint32Array;
  readonly picks: Uint32Array;
  /** Distinct cold rows read in the step (all layers). */
  readonly coldRows: Uint16Array;
  /** Picks cold by the policy's own hot set (before the copies land). */
  readonly policyCold: Uint32Array;
  /** Moves with copies issued just before the step (an exchange's read or write phase, a mirror copy): the step overlaps them. */
  readonly copying: Uint16Array;
  /** Exchanges started before the step, and the policy's moves after it. */
  readonly started: Uint16Array;
  readonly moves: Uint32Array;
  readonly deferred: Uint32Array;
  /** Replay-shaped view (physical cold picks) for src/sim/metrics.ts. */
  readonly replay: ReplayResult;
}

export interface HarnessInput {
  readonly geometry: TieredGeometry;
  readonly bootMap: RowMap;
  readonly steps: readonly SimStep[];
  readonly users: number;
  /** Counts picks on the device each step (the adaptive policy's counter). */
  readonly count?: boolean;
  readonly mode?: PlacementMode;
  /** Called every `every` steps with the step index (progress). */
  readonly progress?: (step: number) => void;
}

export function runTiered(name: string, factory: PolicyFactory, exec: TieredExecutor, input: HarnessInput): TieredRun {
  const g = input.geometry;
  const sg = { layers: g.layers, experts: g.experts, hotPerLayer: g.hotPerLayer, topK: g.topK };
  const policy: Policy = factory({ geometry: sg, bootMap: input.bootMap, steps: input.steps });
  const mode = input.mode ?? 'exchange';
  const boot = mode === 'free' ? policy.hot : input.bootMap;
  // The geometry says how moves are carried out; free (relabelled) moves work the same in both.
  const table: RowPlacement = moveMode(g) === 'mirror'
    ? new MirrorRowTable(g.layers, g.experts, g.hotPerLayer, movesInFlight(g), boot)
    : new RowTable(g.layers, g.experts, g.hotPerLayer, g.stagingRows, boot);
  const allHot = mode === 'all-hot' ? allHotSlots(g.layers, g.experts, g.hotPerLayer) : null;
  const n = input.steps.length;
  const L = g.layers;
  const run: TieredRun = {
    policy: name, steps: n, phase: new Uint16Array(n), stepMs: new Float64Array(n), countMs: new Float64Array(n),
    coldPicks: new Uint32Array(n), picks: new Uint32Array(n), coldRows: new Uint16Array(n), policyCold: new Uint32Array(n),
    copying: new Uint16Array(n), started: new Uint16Array(n), moves: new Uint32Array(n), deferred: new Uint32Array(n),
    replay: {
      policy: name, steps: n, layers: L, tokens: new Uint32Array(n), phase: new Uint16Array(n), picks: new Uint32Array(n),
      cold: new Uint32Array(n), coldPerLayer: new Uint32Array(n * L), hotTouched: new Uint16Array(n * L),
      coldTouched: new Uint16Array(n * L), coldTiles: new Uint16Array(n * L), swaps: new Uint32Array(n),
      copies: new Uint32Array(n), refused: new Uint32Array(n),
    },
  };
  const plan = newPlan(g, input.users);
  const row = L * g.topK;
  for (let s = 0; s < n; s++) {
    const step = input.steps[s]!;
    let slots: Int32Array;
    if (allHot) {
      slots = allHot;
    } else {
      const m = table.beforeStep(policy.hot, exec, mode === 'free');
      run.copying[s] = m.started + m.writing;
      run.started[s] = m.started + m.relabelled;
      run.deferred[s] = m.deferred;
      slots = table.slot;
    }
    planStep(step, g, plan);
    // What this step reads: physical cold picks and rows (from the slot table), policy-cold picks.
    let cold = 0;
    let polCold = 0;
    let coldRows = 0;
    for (let t = 0; t < step.tokens; t++) {
      for (let l = 0; l < L; l++) {
        for (let k = 0; k < g.topK; k++) {
          const e = step.picks[t * row + l * g.topK + k]!;
          const i = l * g.experts + e;
          const c = !allHot && table.isCold(l, e);
          if (c) { cold++; run.replay.coldPerLayer[s * L + l]!++; }
          if (!policy.hot[i]) polCold++;
        }
      }
    }
    if (!allHot) {
      for (let l = 0; l < L; l++) {
        for (let j = 0; j < plan.counts[l]!; j++) {
          if (table.isCold(l, plan.items[(l * plan.maxItems + j) * 8]!)) { coldRows++; run.replay.coldTouched[s * L + l]!++; }
        }
      }
    }
    const times = exec.step(slots, plan, input.count ? step.picks : null, step.tokens);
    const moves = policy.afterStep(step);
    run.phase[s] = step.phase;
    run.stepMs[s] = times.stepMs;
    run.countMs[s] = times.countMs;
    run.coldPicks[s] = cold;
    run.picks[s] = step.tokens * row;
    run.coldRows[s] = coldRows;
    run.policyCold[s] = polCold;
    run.moves[s] = moves.swaps + moves.copies;
    run.replay.tokens[s] = step.tokens;
    run.replay.phase[s] = step.phase;
    run.replay.picks[s] = step.tokens * row;
    run.replay.cold[s] = cold;
    run.replay.swaps[s] = moves.swaps;
    run.replay.copies[s] = moves.copies;
    run.replay.refused[s] = moves.refused;
    if (input.progress && s % 500 === 0) input.progress(s);
  }
  if (!allHot) table.check();
  return run;
}
