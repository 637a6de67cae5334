// Telemetry: the lines of telemetry.jsonl (per drain) and swaps.jsonl (per applied swap), and the per-step ring.
import type { DrainReport } from './controller.ts';
import type { Swap } from './policy.ts';
import type { RowMap } from './rowmap.ts';

/** One line of telemetry.jsonl, version 1. */
export interface DrainLine {
  readonly v: 1;
  /** Wall time, ISO 8601. */
  readonly time: string;
  readonly step: number;
  /** Steps, tokens and counted picks in the window since the previous drain. */
  readonly window_steps: number;
  readonly tokens: number;
  /** Tokens of the counted steps: what the EWMA aged by (half_life_tokens). */
  readonly counted_tokens: number;
  readonly picks: number;
  /** Picks on cold experts / all picks in the window, under the map at drain time. */
  readonly cold_share: number;
  readonly cold_share_by_layer: readonly number[];
  readonly decided: number;
  /** Swaps applied and refused (stale) since the previous drain. */
  readonly swaps_applied: number;
  readonly swaps_refused: number;
  /** Swaps of earlier plans never started (the banks had no room), dropped at this drain and decided again. */
  readonly swaps_superseded: number;
  readonly queue_depth: number;
  readonly frozen: boolean;
  /** Lines this run could not write so far (a full disk), per file; written by the telemetry writer. */
  readonly telemetry_lines_dropped?: number;
  readonly swap_lines_dropped?: number;
}

/**
 * A line of swaps.jsonl after lines were dropped (a full disk): the whole map at that point, so a replay of
 * the file (from its boot record's boot_map) resets to it and stays equal to the live map.
 */
export interface ResyncLine {
  readonly v: 1;
  readonly type: 'resync';
  readonly time: string;
  /** swaps.jsonl lines dropped since the previous resync (or the boot record). */
  readonly lines_dropped: number;
  readonly map: RowMap;
}

/**
 * The first line a run appends to telemetry.jsonl and swaps.jsonl: a folder reused across restarts holds
 * several runs, each starting at step 0, and readers split them here (steps.json names its run too).
 */
export interface BootLine {
  readonly v: 1;
  readonly type: 'boot';
  /** A fresh id per process. */
  readonly run: string;
  readonly time: string;
  readonly pid: number;
  /** Bytes of a torn last line cut off the file before this record (0 normally). */
  readonly torn_bytes_dropped: number;
  /** Whatever the writer was told (model, geometry). */
  readonly [key: string]: unknown;
}

/** One line of swaps.jsonl, version 1: a swap that was applied. */
export interface SwapLine {
  readonly v: 1;
  readonly time: string;
  /** Step after which it landed (was applied). */
  readonly step: number;
  readonly layer: number;
  readonly hot_expert: number;
  readonly hot_row: number;
  readonly cold_expert: number;
  readonly cold_row: number;
  readonly decided_at_step: number;
  readonly reason: Swap['reason'];
  /**
   * Wall time of the row exchange: from its request to its landing. Banks that copy at once (CPU) report the
   * copy itself; background moves (CUDA) report the time their copies took to land, steps running meanwhile.
   */
  readonly apply_ns: number;
}

const round = (x: number) => Math.round(x * 1e6) / 1e6;

export function drainLine(d: DrainReport, time: Date): DrainLine {
  return {
    v: 1, time: time.toISOString(), step: d.step, window_steps: d.steps, tokens: d.tokens, counted_tokens: d.countedTokens, picks: d.picks,
    cold_share: round(d.coldShare), cold_share_by_layer: d.coldShareByLayer.map(round), decided: d.decided.length,
    swaps_applied: d.applied, swaps_refused: d.refused, swaps_superseded: d.superseded, queue_depth: d.queueDepth, frozen: d.frozen,
  };
}

export function swapLine(s: Swap, step: number, applyNs: number, time: Date): SwapLine {
  return {
    v: 1, time: time.toISOString(), step, layer: s.layer, hot_expert: s.hotExpert, hot_row: s.hotRow,
    cold_expert: s.coldExpert, cold_row: s.coldRow, decided_at_step: s.decidedAtStep, reason: s.reason, apply_ns: applyNs,
  };
}

/** The ring's JSON dump, version 1: columns, oldest step first. */
export interface StepRingDump {
  readonly v: 1;
  readonly capacity: number;
  /** Steps ever recorded (those beyond capacity were overwritten). */
  readonly recorded: number;
  readonly step: number[];
  /** Wall time of the step's forward pass, ns. */
  readonly t_ns: number[];
  readonly tokens: number[];
  /** Swaps applied after the step, and the time they took, ns (the stall they added). */
  readonly swaps: number[];
  readonly swap_ns: number[];
}

/**
 * A fixed-size ring of the last `capacity` steps (step, t_ns, tokens, swaps, swap_ns): typed arrays, no
 * allocation per step, so recording costs nothing measurable. Dump it for p99 analysis of steps with swaps.
 */
export class StepRing {
  private readonly stepCol: Float64Array;
  private readonly tCol: Float64Array;
  private readonly tokensCol: Uint32Array;
  private readonly swapsCol: Uint16Array;
  private readonly swapNsCol: Float64Array;
  private n = 0;

  constructor(readonly capacity = 8192) {
    this.stepCol = new Float64Array(capacity);
    this.tCol = new Float64Array(capacity);
    this.tokensCol = new Uint32Array(capacity);
    this.swapsCol = new Uint16Array(capacity);
    this.swapNsCol = new Float64Array(capacity);
  }

  push(step: number, tNs: number, tokens: number, swaps: number, swapNs: number): void {
    const i = this.n % this.capacity;
    this.stepCol[i] = step;
    this.tCol[i] = tNs;
    this.tokensCol[i] = tokens;
    this.swapsCol[i] = Math.min(swaps, 0xffff);
    this.swapNsCol[i] = swapNs;
    this.n++;
  }

  get size(): number { return Math.min(this.n, this.capacity); }

  dump(): StepRingDump {
    const out: StepRingDump = { v: 1, capacity: this.capacity, recorded: this.n, step: [], t_ns: [], tokens: [], swaps: [], swap_ns: [] };
    const start = this.n > this.capacity ? this.n % this.capacity : 0;
    for (let k = 0; k < this.size; k++) {
      const i = (start + k) % this.capacity;
      out.step.push(this.stepCol[i]!);
      out.t_ns.push(this.tCol[i]!);
      out.tokens.push(this.tokensCol[i]!);
      out.swaps.push(this.swapsCol[i]!);
      out.swap_ns.push(this.swapNsCol[i]!);
    }
    return out;
  }
}
