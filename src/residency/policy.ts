// Policy: the budgets, the EWMA of pick counts, and the decision of which hot/cold pairs to swap.
import { z } from 'zod';
import { DEFAULT_COUNT_TMAX } from './counts.ts';
import type { RowMap } from './rowmap.ts';

/** The knobs of the adaptive policy (design.md section 2 gives the defaults). */
export interface Budgets {
  /** Steps between drains of the counter. */
  readonly drain_every: number;
  /** Half-life of the pick EWMA, in engine steps. */
  readonly half_life_steps: number;
  /** A cold expert must be this many times busier than the hot expert it replaces (>= 1). */
  readonly hysteresis: number;
  /** A cold expert needs at least this many decayed picks (see `foldWindow`) to be promoted. */
  readonly min_average: number;
  readonly swaps_per_layer_per_drain: number;
  /** Swaps applied between two steps at most (bounds the stall a step can see). */
  readonly swaps_per_step: number;
  /** Steps of more tokens than this are not counted (prefill). */
  readonly count_tmax: number;
}

export const DEFAULT_BUDGETS: Budgets = Object.freeze({
  drain_every: 64,
  half_life_steps: 500,
  hysteresis: 1.5,
  min_average: 8,
  swaps_per_layer_per_drain: 2,
  swaps_per_step: 8,
  count_tmax: DEFAULT_COUNT_TMAX,
});

const posInt = z.number().int().positive();
/** Budgets as they may appear in a control file: every field optional, unknown keys rejected. */
export const budgetsPatchSchema = z.strictObject({
  drain_every: posInt.optional(),
  half_life_steps: z.number().positive().finite().optional(),
  hysteresis: z.number().min(1).finite().optional(),
  min_average: z.number().nonnegative().finite().optional(),
  swaps_per_layer_per_drain: posInt.optional(),
  // 0 is allowed: it pauses applying without dropping the queue.
  swaps_per_step: z.number().int().nonnegative().optional(),
  count_tmax: posInt.optional(),
});
export type BudgetsPatch = z.infer<typeof budgetsPatchSchema>;

/**
 * Folds one drain window into the EWMA state, in place.
 *
 * Units: `decayed[i]` is a decayed pick count: every pick weighs 0.5^(age/half_life) where age is in steps.
 * Equivalently it is the EWMA pick rate (picks per step) times the EWMA's effective window
 * 1/(1 - 2^(-1/h)) ~= 1.44 h steps (721 steps at h = 500); min_average is in these units, so an expert
 * needs ~8 recent picks, whatever the batch size. (Picks per step would make min_average 8 unreachable at
 * batch 1, where a layer makes only top_k picks per step in all.)
 *
 * The window's `steps` steps decay the old state by 0.5^(steps/h). Its `delta` picks are taken as spread
 * evenly over the window, so each weighs the window's mean decay: delta * (1 - decay) / (steps * (1 - 2^(-1/h))).
 * That makes the estimate independent of the drain interval: a constant rate r converges to r / (1 - 2^(-1/h))
 * whether one drains every step or every 64.
 */
export function foldWindow(decayed: Float64Array, delta: ArrayLike<number>, steps: number, halfLife: number): void {
  if (steps <= 0) return;
  const decay = Math.pow(0.5, steps / halfLife);
  const perStep = 1 - Math.pow(0.5, 1 / halfLife);
  const weight = (1 - decay) / (steps * perStep);
  for (let i = 0; i < decayed.length; i++) decayed[i] = decayed[i]! * decay + delta[i]! * weight;
}

/** One decided exchange: the cold expert moves into hot row `hotRow`, the hot one into cold row `coldRow`. */
export interface Swap {
  readonly layer: number;
  readonly hotExpert: number;
  readonly hotRow: number;
  readonly coldExpert: number;
  readonly coldRow: number;
  readonly decidedAtStep: number;
  /** 'adapt': decided from counts; 'restore': part of a restore-the-boot-map plan. */
  readonly reason: 'adapt' | 'restore';
}

/**
 * Per layer, pairs the busiest cold experts with the least busy hot ones and keeps a pair only when the
 * cold one is at least `hysteresis` times busier and has at least `min_average` decayed picks; at most
 * `swaps_per_layer_per_drain` per layer. Experts with `queued[layer * experts + e] > 0` are left out so queued swaps
 * never conflict. Ties go to the lower expert id. Pure: returns the plan, changes nothing.
 */
export function decideSwaps(
  map: RowMap,
  decayed: Float64Array,
  budgets: Budgets,
  step: number,
  queued?: Uint32Array,
): Swap[] {
  const out: Swap[] = [];
  const E = map.experts;
  const k = budgets.swaps_per_layer_per_drain;
  const hot: number[] = [];
  const cold: number[] = [];
  for (let l = 0; l < map.layers; l++) {
    const rows = map.layers_map[l]!;
    const base = l * E;
    // Only the k extreme experts of each bank matter: one selection pass beats sorting whole banks
    // (40 layers x 384 experts per drain at DeepSeek scale).
    pickRows(rows.hot, decayed, queued, base, k, -1, hot); // least busy first
    pickRows(rows.cold, decayed, queued, base, k, 1, cold); // busiest first
    const n = Math.min(hot.length, cold.length);
    for (let i = 0; i < n; i++) {
      const h = hot[i]!;
      const c = cold[i]!;
      const ha = decayed[base + rows.hot[h]!]!;
      const ca = decayed[base + rows.cold[c]!]!;
      // Pairs only get worse further down both lists, so the first miss ends the layer.
      if (ca < budgets.min_average || ca < budgets.hysteresis * ha || ca <= ha) break;
      out.push({
        layer: l, hotExpert: rows.hot[h]!, hotRow: h, coldExpert: rows.cold[c]!, coldRow: c, decidedAtStep: step, reason: 'adapt',
      });
    }
  }
  return out;
}

/**
 * Fills `out` with the rows of the k experts with the highest (sign 1) or lowest (sign -1) decayed count,
 * best first, skipping experts with queued swaps; ties go to the lower expert id. One pass, insertion into
 * a list of at most k.
 */
function pickRows(ids: readonly number[], decayed: Float64Array, queued: Uint32Array | undefined, base: number,
  k: number, sign: 1 | -1, out: number[]): void {
  out.length = 0;
  // The score and id of the worst kept row, so most experts cost one comparison.
  let worstScore = -Infinity;
  let worstId = -1;
  for (let r = 0; r < ids.length; r++) {
    const e = ids[r]!;
    const score = sign * decayed[base + e]!;
    if (out.length === k && (score < worstScore || (score === worstScore && e > worstId))) continue;
    if (queued !== undefined && queued[base + e]! > 0) continue;
    let at = out.length;
    while (at > 0) {
      const o = ids[out[at - 1]!]!;
      const os = sign * decayed[base + o]!;
      if (score > os || (score === os && e < o)) at--;
      else break;
    }
    out.splice(at, 0, r);
    if (out.length > k) out.pop();
    if (out.length === k) {
      worstId = ids[out[k - 1]!]!;
      worstScore = sign * decayed[base + worstId]!;
    }
  }
}
