// Policy: the budgets, the EWMA of pick counts, and the decision of which hot/cold pairs to swap.
import { z } from 'zod';
import { ResidencyError } from '../errors.ts';
import { DEFAULT_COUNT_TMAX } from './counts.ts';
import { fieldPath } from '../util/field-path.ts';
import type { RowMap } from './rowmap.ts';

/** The knobs of the adaptive policy (design.md section 2 gives the defaults). */
export interface Budgets {
  /** Steps between drains of the counter. */
  readonly drain_every: number;
  /**
   * Half-life of the pick EWMA, in counted (decode) tokens: a step of B users ages the counts by B tokens, so the
   * EWMA covers the same number of picks at any batch size (at 1 user a token is a step).
   */
  readonly half_life_tokens: number;
  /** A cold expert must be this many times busier than the hot expert it replaces (>= 1). */
  readonly hysteresis: number;
  /** A cold expert needs at least this many decayed picks (see `foldWindow`) to be promoted. */
  readonly min_average: number;
  /**
   * What a move costs, in cold-expert reads: a swap is kept only when the cold expert's decayed picks exceed the hot
   * one's by at least this many, i.e. when the picks it saves from the bus over the EWMA's window (a decayed count is
   * the pick rate times that window) pay for the copies. Default 2: a swap copies two rows (the cold expert in, the
   * hot one out), and a row copy moves the same bytes as an in-place read over the same link, at about the same rate
   * (docs/results.md, "Host link"). At batch > 1 a read serves every pick of its step, so counting picks
   * overstates the saving there; hysteresis and min_average are the margin. With the defaults (1.5, 8) every pair they
   * pass already gains >= 8 / 3 picks: the gate binds only where they are lowered. With a seed prior the scores
   * compared are the decision scores (decayed picks plus the prior's pseudo-picks), as for the other two.
   */
  readonly move_cost_picks: number;
  readonly swaps_per_layer_per_drain: number;
  /** Swaps applied between two steps at most (bounds the stall a step can see). */
  readonly swaps_per_step: number;
  /** Steps of more tokens than this are not counted (prefill). */
  readonly count_tmax: number;
  /**
   * Weight of the seed prior, in pseudo-picks per expert on average (decided on decayed + w x E x the
   * prior's share of the layer, see `priorScores`). Only used when the controller has a prior (a seed counts
   * dump); 0 turns it off. A fixed mass, so it matters while live counts are sparse and fades as they densify.
   */
  readonly prior_picks_per_expert: number;
}

/**
 * Short drains and a short memory: real text's experts change from document to document, and a long drain decides on
 * stale counts. The half-life counts tokens, not steps, so it spans the same text at any batch size. The runs that
 * chose these values: docs/results.md, "Residency defaults".
 */
export const DEFAULT_BUDGETS: Budgets = Object.freeze({
  drain_every: 16,
  half_life_tokens: 250,
  hysteresis: 1.5,
  min_average: 8,
  move_cost_picks: 2,
  swaps_per_layer_per_drain: 2,
  swaps_per_step: 8,
  count_tmax: DEFAULT_COUNT_TMAX,
  prior_picks_per_expert: 1,
});

/** An integer in [min, max]; the bounds are sanity, not tuning: far past anything useful, short of breaking the arithmetic. */
const intIn = (min: number, max: number) => z.number().int().min(min).max(max);
const numIn = (min: number, max: number) => z.number().min(min).max(max);
/**
 * Budgets as they may appear in a control file: every field optional, unknown keys rejected, every value
 * finite and in a sane range (an accepted budget is applied to the live controller, so a value that breaks
 * the EWMA, such as a half-life of 1e17 tokens, must be refused here).
 */
export const budgetsPatchSchema = z.strictObject({
  drain_every: intIn(1, 1_000_000).optional(),
  half_life_tokens: numIn(1, 1e9).optional(),
  // The old name, from when the EWMA aged per step rather than per token: refused with the new name, not as an
  // unknown key, so an old control file says what to change.
  half_life_steps: z.never({ error: 'renamed half_life_tokens (the EWMA ages per decoded token; at 1 user a token is a step)' }).optional(),
  hysteresis: numIn(1, 1000).optional(),
  min_average: numIn(0, 1e9).optional(),
  move_cost_picks: numIn(0, 1e9).optional(),
  swaps_per_layer_per_drain: intIn(1, 65_536).optional(),
  // 0 is allowed: it pauses applying; the queue stays (each drain decides it again on its counts).
  swaps_per_step: intIn(0, 65_536).optional(),
  count_tmax: intIn(1, 10_000_000).optional(),
  prior_picks_per_expert: numIn(0, 1e6).optional(),
});
export type BudgetsPatch = z.infer<typeof budgetsPatchSchema>;

/**
 * Budgets as given (a controller's options, a command-line flag): checked by budgetsPatchSchema, the error naming the
 * field under `label` (`budgets.half_life_tokens: ...`); the fields not given are left out.
 */
export function parseBudgets(json: unknown, label: string, code: 'BAD_CONFIG' | 'BAD_ARGUMENT' = 'BAD_CONFIG'): Partial<Budgets> {
  const r = budgetsPatchSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new ResidencyError(code, `${label}${issue.path.length ? `.${fieldPath(issue.path)}` : ''}: ${issue.message}`);
  }
  const { half_life_steps: _renamed, ...known } = r.data;
  return Object.fromEntries(Object.entries(known).filter(([, v]) => v !== undefined)) as Partial<Budgets>;
}

/**
 * Folds one drain window into the EWMA state, in place.
 *
 * Units: `decayed[i]` is a decayed pick count: every pick weighs 0.5^(age/half_life), age in the caller's unit of time
 * (the controller's: counted tokens, so a step of B users ages the state by B). Equivalently it is the EWMA pick rate
 * (picks per unit) times the EWMA's effective window 1/(1 - 2^(-1/h)) ~= 1.44 h units (361 tokens at h = 250);
 * min_average is in these units, so an expert needs ~8 recent picks, whatever the batch size. (Picks per step would
 * make min_average 8 unreachable at batch 1, where a layer makes only top_k picks per step in all.)
 *
 * The window's `span` units decay the old state by 0.5^(span/h). Its `delta` picks are taken as spread evenly over the
 * window, so each weighs the window's mean decay: delta * (1 - decay) / (span * (1 - 2^(-1/h))). That makes the
 * estimate independent of the drain interval: a constant rate r converges to r / (1 - 2^(-1/h)) whether one drains
 * every unit or every 64. A window of span 0 (no counted tokens) ages nothing and adds its picks at full weight.
 */
export function foldWindow(decayed: Float64Array, delta: ArrayLike<number>, span: number, halfLife: number): void {
  if (!(span > 0)) {
    for (let i = 0; i < decayed.length; i++) decayed[i] = decayed[i]! + delta[i]!;
    return;
  }
  const decay = halfLife > 0 ? Math.pow(0.5, span / halfLife) : 0;
  // expm1, not 1 - 0.5^x: for a long half-life 1 - 0.5^(1/h) rounds to 0 and the weight became 0/0 = NaN,
  // which no later drain or budget could wash out. The ratio tends to 1 as h grows; a non-finite one
  // (a caller's bad half-life) falls back to 1 rather than poisoning the state.
  const l = -Math.LN2 / halfLife;
  const ratio = Math.expm1(span * l) / (span * Math.expm1(l));
  const weight = Number.isFinite(ratio) ? ratio : 1;
  for (let i = 0; i < decayed.length; i++) decayed[i] = decayed[i]! * decay + delta[i]! * weight;
}

/**
 * Per layer, E x each expert's share of the layer's prior picks, so the shares average 1 per expert (the
 * prior's unit: w x shares is w pseudo-picks per expert on average). `counts` is laid out
 * [layer * experts + expert], e.g. a counts dump's cumulative table flattened. A layer with no picks at all
 * gets all 1s (a flat prior: it shifts every score alike and changes no ranking).
 */
export function priorShares(counts: ArrayLike<number>, layers: number, experts: number): Float64Array {
  const n = layers * experts;
  if (counts.length !== n) {
    throw new ResidencyError('BAD_COUNTS', `prior: ${counts.length} counts, expected ${layers} layers x ${experts} experts = ${n}`);
  }
  for (let i = 0; i < n; i++) {
    const c = counts[i]!;
    if (typeof c !== 'number' || !Number.isFinite(c) || c < 0) {
      throw new ResidencyError('BAD_COUNTS', `prior[${i}] (layer ${Math.floor(i / experts)}, expert ${i % experts}): expected a finite count >= 0, got ${c}`);
    }
  }
  const out = new Float64Array(n);
  for (let l = 0; l < layers; l++) {
    let sum = 0;
    for (let i = l * experts; i < (l + 1) * experts; i++) sum += counts[i]!;
    for (let i = l * experts; i < (l + 1) * experts; i++) out[i] = sum > 0 ? (experts * counts[i]!) / sum : 1;
  }
  return out;
}

/**
 * The scores the policy decides on with a prior: out = decayed + w x prior (prior from `priorShares`), in
 * decayed-pick units, so min_average and hysteresis apply to the sum. Writes into `out` (reused by the
 * controller: no allocation per drain) and returns it.
 */
export function priorScores(prior: Float64Array, w: number, decayed: Float64Array, out: Float64Array): Float64Array {
  for (let i = 0; i < decayed.length; i++) out[i] = decayed[i]! + w * prior[i]!;
  return out;
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
 * cold one is at least `hysteresis` times busier, has at least `min_average` decayed picks, and has at least
 * `move_cost_picks` more than the hot one (the move pays for its copies); at most `swaps_per_layer_per_drain` per layer.
 * Experts with `queued[layer * experts + e] > 0` are left out so queued swaps never conflict. Ties go to the lower
 * expert id. The plan is ordered by gain (the cold expert's score less the hot one's), largest first, so banks that
 * start fewer swaps than a drain decides (background copies) take the most valuable ones. Equal gains go round the
 * layers (each layer's first pair, then each one's second), from `firstLayer` on (the controller passes the layer
 * after the last swap it started), so no layer waits behind the others' numbers. Pure: returns the plan, changes nothing.
 */
export function decideSwaps(
  map: RowMap,
  decayed: Float64Array,
  budgets: Budgets,
  step: number,
  queued?: Uint32Array,
  firstLayer = 0,
): Swap[] {
  const out: Swap[] = [];
  const gains: number[] = [];
  const ranks: number[] = [];
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
      if (ca < budgets.min_average || ca < budgets.hysteresis * ha || ca <= ha || ca - ha < budgets.move_cost_picks) break;
      out.push({
        layer: l, hotExpert: rows.hot[h]!, hotRow: h, coldExpert: rows.cold[c]!, coldRow: c, decidedAtStep: step, reason: 'adapt',
      });
      gains.push(ca - ha);
      ranks.push(i);
    }
  }
  // A layer's pairs come out in falling gain already; equal gains: first pairs before second ones, each round in
  // layer order from firstLayer.
  const L = map.layers;
  const turn = (i: number): number => (out[i]!.layer - firstLayer + L) % L;
  const order = out.map((_, i) => i).sort((a, b) => gains[b]! - gains[a]! || ranks[a]! - ranks[b]! || turn(a) - turn(b));
  return order.map((i) => out[i]!);
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
