// Counts: the [layers][experts] pick counter, its snapshots and deltas, and the counts dump format.
import { z } from 'zod';
import { ResidencyError } from '../errors.ts';
import { fieldPath } from '../util/field-path.ts';

/** Default largest step (in tokens) whose picks are counted: bigger steps are prefill, and prefill is noise. */
export const DEFAULT_COUNT_TMAX = 256;

/**
 * A cumulative counter snapshot: uint32 [layers][experts] row-major, one increment per routed pick since
 * the counter was created. It wraps at 2^32, so only differences of snapshots mean anything.
 */
export type CountSnapshot = Uint32Array;

/** Picks between two snapshots of the same counter: unsigned subtraction, so a wrap in between is harmless. */
export function countDelta(prev: CountSnapshot, next: CountSnapshot, out: Uint32Array = new Uint32Array(next.length)): Uint32Array {
  if (prev.length !== next.length || out.length !== next.length) {
    throw new ResidencyError('BAD_COUNTS', `counter snapshots differ in size: ${prev.length} vs ${next.length}`);
  }
  for (let i = 0; i < next.length; i++) out[i] = (next[i]! - prev[i]!) >>> 0;
  return out;
}

/**
 * The host twin of the device counter (for the simulator and tests): the same table, the same rule that a
 * step of more than count_tmax tokens is not counted. The caller decides whether counting is on at all.
 */
export class Counter {
  readonly table: Uint32Array;
  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly topK: number,
  ) {
    this.table = new Uint32Array(layers * experts);
  }

  /**
   * Counts one step's routing, `routing[token][layer][k]` expert ids (any array-like: a trace slice, an
   * Int32Array from a backend). Returns whether the step was counted (tokens <= countTmax).
   */
  addPicks(routing: ArrayLike<number>, tokens: number, countTmax = DEFAULT_COUNT_TMAX): boolean {
    const stride = this.layers * this.topK;
    if (routing.length < tokens * stride) {
      throw new ResidencyError('BAD_COUNTS', `routing holds ${routing.length} ids, ${tokens} tokens need ${tokens * stride}`);
    }
    if (tokens > countTmax) return false;
    const t = this.table;
    for (let i = 0; i < tokens * stride; i++) {
      const layer = Math.floor(i / this.topK) % this.layers;
      const e = routing[i]!;
      if (e < 0 || e >= this.experts) throw new ResidencyError('BAD_COUNTS', `routing[${i}]: expert ${e} out of range`);
      t[layer * this.experts + e] = t[layer * this.experts + e]! + 1; // Uint32Array store wraps mod 2^32
    }
    return true;
  }

  /** A copy of the table (the device counter's async copy to host, in the engine). */
  snapshot(): CountSnapshot {
    return this.table.slice();
  }
}

/** The counts dump, version 1: what the controller knew at `step` (fit-map's input). */
export interface CountsDump {
  readonly version: 1;
  readonly model: string;
  /** Engine step at which the dump was taken. */
  readonly step: number;
  /** Steps whose picks were counted since the controller started. */
  readonly decode_steps: number;
  /** Half-life of the `decayed` counts, in counted tokens (steps in dumps written while the EWMA aged per step). */
  readonly half_life: number;
  /** [layers][experts] decayed pick counts (the controller's EWMA state, in decayed picks). */
  readonly decayed: readonly (readonly number[])[];
  /** [layers][experts] picks counted since the controller started (not wrapped). */
  readonly cumulative: readonly (readonly number[])[];
}

const table = z.array(z.array(z.number().nonnegative()));
const countsDumpSchema = z.strictObject({
  version: z.literal(1),
  model: z.string(),
  step: z.number().int().nonnegative(),
  decode_steps: z.number().int().nonnegative(),
  half_life: z.number().positive(),
  decayed: table,
  cumulative: table,
});

/** Validates untrusted JSON as a counts dump (rectangular tables of equal shape). Throws BAD_COUNTS naming the field. */
export function parseCountsDump(json: unknown, source = 'counts dump'): CountsDump {
  const r = countsDumpSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new ResidencyError('BAD_COUNTS', `${source}: ${fieldPath(issue.path, '(root)')}: ${issue.message}`);
  }
  const d = r.data as CountsDump;
  const layers = d.cumulative.length;
  const experts = d.cumulative[0]?.length ?? 0;
  if (layers === 0 || experts === 0) throw new ResidencyError('BAD_COUNTS', `${source}: cumulative: empty table`);
  for (const name of ['cumulative', 'decayed'] as const) {
    const t = d[name];
    if (t.length !== layers) throw new ResidencyError('BAD_COUNTS', `${source}: ${name}: ${t.length} layers, expected ${layers}`);
    t.forEach((row, l) => {
      if (row.length !== experts) {
        throw new ResidencyError('BAD_COUNTS', `${source}: ${name}[${l}]: ${row.length} experts, expected ${experts}`);
      }
    });
  }
  return d;
}

/** Rows of a flat [layers][experts] table as nested arrays (the dump's JSON shape). */
export function toRows(flat: ArrayLike<number>, layers: number, experts: number, round = false): number[][] {
  const out: number[][] = [];
  for (let l = 0; l < layers; l++) {
    const row: number[] = [];
    for (let e = 0; e < experts; e++) {
      const v = flat[l * experts + e]!;
      row.push(round ? Math.round(v * 1000) / 1000 : v);
    }
    out.push(row);
  }
  return out;
}
