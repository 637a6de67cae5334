// Moves as host-mirror copies (--moves mirror): the host bank holds a copy of EVERY expert row of a layer
// (E rows, mapped pinned memory, read in place like the cold bank), so an expert is always in host memory
// and evicting it needs no copy. Why: device->host copies collapse to 10-31% of their rate while steps
// read cold rows in place (README, "PCIe contention"), and an exchange's write-back phase is exactly such
// a copy; here a move is one host->device copy and nothing is ever written to host memory.
//
// Slots: 0..H-1 hot bank rows (HBM), H + e expert e's mirror row (host). No staging rows, so the kernels'
// bank descriptor (kernels/tiered.cu) resolves these unchanged with its cold-bank size C = E.
// A move (A leaves hot row h, B enters):
//   start: the table points A at its mirror row at once (no copy), and one copy mirror(B) -> h is issued,
//          ordered after the last step enqueued (the last one that read A@h: the mover's copy() waits for
//          it); B keeps reading its mirror row meanwhile, so no step reads h while it is written.
//   done:  once the copy lands, the table points B at h.
// At most `maxInFlight` moves are in flight (the exchange pipeline's depth); further wanted moves wait
// (`deferred`). Free moves (hindsight oracles) relabel: B takes h, A its mirror row, no copy.
import type { RowMap } from '../../src/residency/rowmap.ts';
import { leavingAndEntering, type RowCopy, type RowMover, type RowPlacement, type StepMoves } from './rows.ts';

interface MirrorMove {
  readonly layer: number;
  /** Entering expert, and the hot row it is copied into. */
  readonly b: number;
  readonly hotRow: number;
  ticket: number;
}

export class MirrorRowTable implements RowPlacement {
  readonly slot: Int32Array;
  /** Where the expert lives once in-flight moves land: a hot row, or its mirror slot H + e. */
  private readonly home: Int32Array;
  /** 1 while the expert's copy into its hot row is in flight. */
  private readonly busy: Uint8Array;
  /** Expert whose home is hot row h ([layer * H + h]). */
  private readonly hotOwner: Int32Array;
  private inflight: MirrorMove[] = [];

  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly hotRows: number,
    readonly maxInFlight: number,
    boot: RowMap | Uint8Array,
  ) {
    if (!(maxInFlight >= 1)) throw new Error(`mirror rows: maxInFlight ${maxInFlight}, expected >= 1`);
    const n = layers * experts;
    this.slot = new Int32Array(n);
    this.home = new Int32Array(n);
    this.busy = new Uint8Array(n);
    this.hotOwner = new Int32Array(layers * hotRows).fill(-1);
    for (let l = 0; l < layers; l++) {
      let hot: number[];
      if (boot instanceof Uint8Array) {
        hot = [];
        for (let e = 0; e < experts; e++) if (boot[l * experts + e]) hot.push(e);
      } else {
        hot = boot.layers_map[l]!.hot.slice();
      }
      for (let e = 0; e < experts; e++) this.place(l, e, this.mirror(e));
      hot.forEach((e, r) => this.place(l, e, r));
    }
  }

  /** Expert e's mirror slot (fixed). */
  mirror(e: number): number {
    return this.hotRows + e;
  }

  private place(l: number, e: number, slot: number): void {
    const i = l * this.experts + e;
    this.slot[i] = slot;
    this.home[i] = slot;
    if (slot < this.hotRows) this.hotOwner[l * this.hotRows + slot] = e;
  }

  get inFlight(): number { return this.inflight.length; }

  isCold(l: number, e: number): boolean {
    return this.slot[l * this.experts + e]! >= this.hotRows;
  }

  /**
   * Lands finished copies (B -> its hot row), then pairs leaving with entering experts per layer in id
   * order and starts one copy per pair. `started` counts copies issued before this step; there is no
   * second phase, so `writing` is always 0.
   */
  beforeStep(wantHot: Uint8Array, mover: RowMover, free = false): StepMoves {
    let finished = 0;
    const still: MirrorMove[] = [];
    for (const m of this.inflight) {
      if (!mover.done(m.ticket)) { still.push(m); continue; }
      const ib = m.layer * this.experts + m.b;
      this.slot[ib] = m.hotRow;
      this.busy[ib] = 0;
      finished++;
    }
    this.inflight = still;

    const copies: RowCopy[] = [];
    const started: MirrorMove[] = [];
    let deferred = 0;
    let relabelled = 0;
    for (let l = 0; l < this.layers; l++) {
      const { leave, enter } = leavingAndEntering(l, this.experts, this.hotRows, this.home, this.busy, wantHot);
      const pairs = Math.min(leave.length, enter.length);
      for (let p = 0; p < pairs; p++) {
        const a = leave[p]!;
        const b = enter[p]!;
        const hotRow = this.home[l * this.experts + a]!;
        if (free) {
          this.place(l, a, this.mirror(a));
          this.place(l, b, hotRow);
          relabelled++;
          continue;
        }
        if (this.inflight.length + started.length >= this.maxInFlight) { deferred += pairs - p; break; }
        // A is read from its mirror row from this step on; h is written only after the last step that read it.
        this.place(l, a, this.mirror(a));
        const ib = l * this.experts + b;
        this.home[ib] = hotRow;
        this.hotOwner[l * this.hotRows + hotRow] = b;
        this.busy[ib] = 1;
        copies.push({ layer: l, src: this.mirror(b), dst: hotRow });
        started.push({ layer: l, b, hotRow, ticket: -1 });
      }
    }
    if (copies.length > 0) {
      const t = mover.copy(copies);
      for (const m of started) { m.ticket = t; this.inflight.push(m); }
    }
    return { started: started.length, writing: 0, finished, deferred, relabelled };
  }

  /**
   * Invariants: per layer, H experts have hot homes and each hot row has exactly that one owner; every
   * other expert's home is its own mirror row; an expert reads its home unless its copy is in flight, and
   * then its mirror row (never the hot row being written); no more than maxInFlight moves in flight.
   */
  check(): void {
    if (this.inflight.length > this.maxInFlight) throw new Error(`mirror rows: ${this.inflight.length} moves in flight, cap ${this.maxInFlight}`);
    const inFlight = new Set(this.inflight.map((m) => m.layer * this.experts + m.b));
    for (let l = 0; l < this.layers; l++) {
      let hot = 0;
      for (let e = 0; e < this.experts; e++) {
        const i = l * this.experts + e;
        const h = this.home[i]!;
        const s = this.slot[i]!;
        if (h < this.hotRows) {
          hot++;
          if (h < 0 || this.hotOwner[l * this.hotRows + h] !== e) throw new Error(`mirror rows: layer ${l} expert ${e} home ${h} owned by ${this.hotOwner[l * this.hotRows + h]}`);
        } else if (h !== this.mirror(e)) {
          throw new Error(`mirror rows: layer ${l} expert ${e} home ${h} is not its mirror row ${this.mirror(e)}`);
        }
        const want = this.busy[i] ? this.mirror(e) : h;
        if (s !== want) throw new Error(`mirror rows: layer ${l} expert ${e} reads slot ${s}, expected ${want}${this.busy[i] ? ' (copy in flight)' : ''}`);
        if (!!this.busy[i] !== inFlight.has(i)) throw new Error(`mirror rows: layer ${l} expert ${e} busy flag disagrees with the moves in flight`);
      }
      if (hot !== this.hotRows) throw new Error(`mirror rows: layer ${l} has ${hot} hot homes, expected ${this.hotRows}`);
    }
  }

  homeHotMask(): Uint8Array {
    const m = new Uint8Array(this.layers * this.experts);
    for (let i = 0; i < m.length; i++) m[i] = this.home[i]! < this.hotRows ? 1 : 0;
    return m;
  }
}
