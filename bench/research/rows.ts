// The physical side of residency in the tiered benchmark: which row each expert is read from (the slot
// table the kernels use) and the row exchanges that carry out a policy's moves.
//
// Slots: 0..H-1 hot bank rows (HBM), H..H+C-1 cold bank rows (mapped pinned host memory, read in place),
// H+C.. staging rows (HBM). A policy only says which experts should be hot; an exchange of a leaving hot
// expert A (hot row h) with an entering cold expert B (cold row c) runs in two copy phases on the copy
// stream, never writing a row that a running step may read:
//   read:  h -> stage_A (HBM->HBM) and c -> stage_B (host->HBM); the table still says A@h, B@c.
//   write: (once the read copies are done) the table says A@stage_A, B@stage_B, so h and c have no reader;
//          stage_B -> h and stage_A -> c, each ordered after the last step that read the old table.
//   done:  the table says A@c, B@h; the staging rows are free again.
// So B is served from HBM from the step after its read copy lands, and no step waits for a copy.
// Free moves (the hindsight oracle) just relabel: A and B exchange slots without copying (the weights are
// random, so only where bytes are read matters for time).
import type { RowMap } from '../../src/residency/rowmap.ts';

export interface RowCopy {
  readonly layer: number;
  readonly src: number;
  readonly dst: number;
}

/** What moves rows: the GPU copy stream, or the CPU cost model. */
export interface RowMover {
  /** Enqueue copies (in order, after every step enqueued so far); returns a ticket. */
  copy(copies: readonly RowCopy[]): number;
  /** True when every copy of `ticket` has completed. */
  done(ticket: number): boolean;
}

interface Exchange {
  readonly layer: number;
  readonly a: number; // leaving expert (was hot)
  readonly b: number; // entering expert (was cold)
  readonly hotRow: number;
  readonly coldRow: number;
  readonly stageA: number;
  readonly stageB: number;
  phase: 'read' | 'write';
  ticket: number;
}

export interface StepMoves {
  /** Exchanges whose read copies were issued before this step. */
  readonly started: number;
  /** Exchanges whose write copies were issued before this step. */
  readonly writing: number;
  /** Exchanges completed (table now at the final rows). */
  readonly finished: number;
  /** Wanted exchanges not started for lack of staging rows (retried next step). */
  readonly deferred: number;
  /** Relabelled for free (oracle). */
  readonly relabelled: number;
}

/**
 * Where each expert is read from, and how a policy's wanted hot set is reached: row exchanges (RowTable,
 * below) or host-mirror copies (MirrorRowTable, mirror-rows.ts). The harness only uses this.
 */
export interface RowPlacement {
  /** Slot per [layer * experts + expert]: what the kernels read this step. */
  readonly slot: Int32Array;
  /** Moves whose copies have not all landed. */
  readonly inFlight: number;
  /** True when expert `e` of layer `l` is read from host memory (in place) this step. */
  isCold(l: number, e: number): boolean;
  /** Before each step: advance landed moves, start moves towards `wantHot`; `free` relabels instead. */
  beforeStep(wantHot: Uint8Array, mover: RowMover, free?: boolean): StepMoves;
  /** Throws on a broken invariant. */
  check(): void;
  /** Experts whose home is a hot row (what the table says once nothing is in flight). */
  homeHotMask(): Uint8Array;
}

export class RowTable implements RowPlacement {
  /** Slot per [layer * experts + expert]: what the kernels read this step. */
  readonly slot: Int32Array;
  /** Where the expert lives once in-flight exchanges finish (a hot or cold row). */
  private readonly home: Int32Array;
  private readonly busy: Uint8Array;
  private readonly freeStaging: number[] = [];
  private inflight: Exchange[] = [];
  /** Slot -> expert, per layer, for hot and cold rows ([layer * (H + C) + row]). */
  private readonly owner: Int32Array;

  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly hotRows: number,
    stagingRows: number,
    boot: RowMap | Uint8Array,
  ) {
    const n = layers * experts;
    this.slot = new Int32Array(n);
    this.home = new Int32Array(n);
    this.busy = new Uint8Array(n);
    this.owner = new Int32Array(layers * experts);
    const C = experts - hotRows;
    for (let s = 0; s < stagingRows; s++) this.freeStaging.push(hotRows + C + s);
    for (let l = 0; l < layers; l++) {
      let hot: number[];
      let cold: number[];
      if (boot instanceof Uint8Array) {
        hot = []; cold = [];
        for (let e = 0; e < experts; e++) (boot[l * experts + e] ? hot : cold).push(e);
      } else {
        hot = boot.layers_map[l]!.hot.slice();
        cold = boot.layers_map[l]!.cold.slice();
      }
      hot.forEach((e, r) => this.place(l, e, r));
      cold.forEach((e, r) => this.place(l, e, hotRows + r));
    }
  }

  private place(l: number, e: number, row: number): void {
    this.slot[l * this.experts + e] = row;
    this.home[l * this.experts + e] = row;
    this.owner[l * this.experts + row] = e;
  }

  get inFlight(): number { return this.inflight.length; }

  /** True when expert `e` of layer `l` is read from the cold bank (host memory) this step. */
  isCold(l: number, e: number): boolean {
    const s = this.slot[l * this.experts + e]!;
    return s >= this.hotRows && s < this.experts;
  }

  /**
   * Called before each step: advances in-flight exchanges whose copies completed, then starts exchanges
   * that bring the homes towards `wantHot` ([layer * experts], 1 = hot). `free` relabels instead.
   */
  beforeStep(wantHot: Uint8Array, mover: RowMover, free = false): StepMoves {
    let writing = 0;
    let finished = 0;
    const writes: RowCopy[] = [];
    const writeSet: Exchange[] = [];
    const still: Exchange[] = [];
    for (const x of this.inflight) {
      if (!mover.done(x.ticket)) { still.push(x); continue; }
      const ia = x.layer * this.experts + x.a;
      const ib = x.layer * this.experts + x.b;
      if (x.phase === 'read') {
        this.slot[ia] = x.stageA;
        this.slot[ib] = x.stageB;
        writes.push({ layer: x.layer, src: x.stageB, dst: x.hotRow }, { layer: x.layer, src: x.stageA, dst: x.coldRow });
        x.phase = 'write';
        writeSet.push(x);
        still.push(x);
        writing++;
      } else {
        this.slot[ia] = x.coldRow;
        this.slot[ib] = x.hotRow;
        this.busy[ia] = 0;
        this.busy[ib] = 0;
        this.freeStaging.push(x.stageA, x.stageB);
        finished++;
      }
    }
    if (writes.length > 0) {
      const t = mover.copy(writes);
      for (const x of writeSet) x.ticket = t;
    }
    this.inflight = still;

    // Pair leaving with entering experts per layer, in id order (deterministic).
    const reads: RowCopy[] = [];
    const started: Exchange[] = [];
    let deferred = 0;
    let relabelled = 0;
    for (let l = 0; l < this.layers; l++) {
      const { leave, enter } = leavingAndEntering(l, this.experts, this.hotRows, this.home, this.busy, wantHot);
      const pairs = Math.min(leave.length, enter.length);
      for (let p = 0; p < pairs; p++) {
        const a = leave[p]!;
        const b = enter[p]!;
        const ia = l * this.experts + a;
        const ib = l * this.experts + b;
        const hotRow = this.home[ia]!;
        const coldRow = this.home[ib]!;
        if (free) {
          this.place(l, b, hotRow);
          this.place(l, a, coldRow);
          relabelled++;
          continue;
        }
        if (this.freeStaging.length < 2) { deferred += pairs - p; break; }
        const stageA = this.freeStaging.pop()!;
        const stageB = this.freeStaging.pop()!;
        this.home[ia] = coldRow;
        this.home[ib] = hotRow;
        this.owner[l * this.experts + hotRow] = b;
        this.owner[l * this.experts + coldRow] = a;
        this.busy[ia] = 1;
        this.busy[ib] = 1;
        reads.push({ layer: l, src: hotRow, dst: stageA }, { layer: l, src: coldRow, dst: stageB });
        started.push({ layer: l, a, b, hotRow, coldRow, stageA, stageB, phase: 'read', ticket: -1 });
      }
    }
    if (reads.length > 0) {
      const t = mover.copy(reads);
      for (const x of started) { x.ticket = t; this.inflight.push(x); }
    }
    return { started: started.length, writing, finished, deferred, relabelled };
  }

  /** Checks the table: every expert has one row, hot+cold rows are a permutation. Throws on a broken invariant. */
  check(): void {
    for (let l = 0; l < this.layers; l++) {
      const seen = new Uint8Array(this.experts);
      for (let e = 0; e < this.experts; e++) {
        const h = this.home[l * this.experts + e]!;
        if (h < 0 || h >= this.experts || seen[h]) throw new Error(`rows: layer ${l} expert ${e} home ${h} duplicated or out of range`);
        seen[h] = 1;
        if (this.owner[l * this.experts + h] !== e) throw new Error(`rows: layer ${l} row ${h} owner ${this.owner[l * this.experts + h]} != ${e}`);
      }
    }
  }

  /** Homes that are hot rows, as a mask (what the table will say once nothing is in flight). */
  homeHotMask(): Uint8Array {
    const m = new Uint8Array(this.layers * this.experts);
    for (let i = 0; i < m.length; i++) m[i] = this.home[i]! < this.hotRows ? 1 : 0;
    return m;
  }
}

/**
 * Layer l's experts not being moved (`busy` 0) whose home is a hot row but not wanted hot (`leave`), and whose
 * home is not a hot row but wanted hot (`enter`), each in id order: both tables pair leave[p] with enter[p].
 */
export function leavingAndEntering(
  l: number, experts: number, hotRows: number, home: Int32Array, busy: Uint8Array, wantHot: Uint8Array,
): { leave: number[]; enter: number[] } {
  const leave: number[] = [];
  const enter: number[] = [];
  for (let e = 0; e < experts; e++) {
    const i = l * experts + e;
    if (busy[i]) continue;
    const homeHot = home[i]! < hotRows;
    if (homeHot && !wantHot[i]) leave.push(e);
    else if (!homeHot && wantHot[i]) enter.push(e);
  }
  return { leave, enter };
}

/** All-hot: every expert read from a hot row (expert e -> hot row e mod H; rows reused, see README). */
export function allHotSlots(layers: number, experts: number, hotRows: number): Int32Array {
  const s = new Int32Array(layers * experts);
  for (let l = 0; l < layers; l++) for (let e = 0; e < experts; e++) s[l * experts + e] = e % hotRows;
  return s;
}
