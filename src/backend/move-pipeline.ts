// The schedule of background row exchanges through spare hot rows: which exchange copies what and when, and when
// it lands. The CUDA banks run it with real copies and events (cuda/banks.ts); the simulator runs the same schedule
// with copies that finish by the next step boundary (sim/model-banks.ts, under adaptive and the followed copy-on-miss
// policies), so its maps trail the policy the way the device's do. Pure: what a copy or a landing does is the caller's
// (`MoveSteps`).
//
// An exchange of hot expert A (hot row h) and cold expert B (cold row c) is two copies, one at a time:
//   1. B's cold row -> a spare hot row of its layer. Landed: B is read from that row from the next step on.
//   2. A's hot row -> B's old cold row (which no step reads any more). Landed: A is read from there, the exchange is
//      reported, and the hot row A left is the layer's new spare.
// At most `copiesInFlight` copies are queued at once over all layers, and a layer has only its spare rows.
import { ResidencyError } from '../errors.ts';
import type { RowExchange } from './backend.ts';

/** Default spare rows per layer: two exchanges of a layer in flight at once (the policy's default per drain). */
export const DEFAULT_SPARE_ROWS = 2;

/**
 * Default copies queued at once. A copy lands at a step boundary and an exchange holds its slot for its two copies,
 * so steps land at most half this many exchanges each. With 2 the map trailed the policy on the device; 4 kept up
 * without slowing the steps that copies overlap (docs/results.md, "Residency defaults").
 */
export const DEFAULT_COPIES_IN_FLIGHT = 4;

export interface PipelineMove extends RowExchange {
  readonly leave: number; // A: the hot expert going cold
  readonly enter: number; // B: the cold expert coming in
  /** The spare hot row B lands in (-1 until phase 1 starts); the caller may reuse it once phase 1 has landed. */
  spare: number;
  /** 0 waiting for a copy slot and a spare row; 1 and 2 as in the header. */
  phase: 0 | 1 | 2;
}

/** What the owner of the rows does at each point of an exchange. */
export interface MoveSteps<M extends PipelineMove> {
  /** Whether the copy `m` last queued has finished. */
  copyDone(m: M): boolean;
  /** Queue phase 1's copy (B's cold row into hot row m.spare). */
  copyIn(m: M): void;
  /** Phase 1 landed: B is read from m.spare from the next step on. */
  landIn(m: M): void;
  /** Queue phase 2's copy (A's hot row into B's old cold row), after the landings of this advance took effect. */
  copyOut(m: M): void;
  /** Phase 2 landed: A is read from B's old cold row; returns the hot row A left (the layer's new spare). */
  landOut(m: M): number;
  /** Called once per advance in which anything landed, with the layers that changed, before any copy is queued. */
  landed(layers: ReadonlySet<number>): void;
}

export class MovePipeline<M extends PipelineMove> {
  private readonly moves: M[] = [];
  private copiesQueued = 0;

  /** `spareRows[layer]`: the layer's free hot rows; `copiesInFlight` >= 1. */
  constructor(private readonly spareRows: number[][], readonly copiesInFlight: number) {
    if (!Number.isInteger(copiesInFlight) || copiesInFlight < 1) {
      throw new ResidencyError('BAD_ARGUMENT', `copiesInFlight ${copiesInFlight}: expected an integer >= 1`);
    }
  }

  /** Exchanges requested and not landed yet. */
  get moving(): number {
    return this.moves.length;
  }

  /** Copy slots free, less the exchanges already waiting for one (or for a spare row of their layer). */
  get startable(): number {
    let waiting = 0;
    for (const m of this.moves) if (m.phase === 0) waiting++;
    return Math.max(0, this.copiesInFlight - this.copiesQueued - waiting);
  }

  /** Whether an exchange in flight holds hot row `hotRow` or cold row `coldRow` of `layer`. */
  busy(layer: number, hotRow: number, coldRow: number): boolean {
    return this.moves.some((m) => m.layer === layer && (m.hotRow === hotRow || m.coldRow === coldRow));
  }

  /** Adds an exchange (phase 0, spare -1); refused (BAD_ARGUMENT) if either row is already moving. Call advance after. */
  request(m: M): void {
    if (this.busy(m.layer, m.hotRow, m.coldRow)) {
      throw new ResidencyError('BAD_ARGUMENT', `requestSwap: layer ${m.layer} hot row ${m.hotRow} or cold row ${m.coldRow} is already moving`);
    }
    this.moves.push(m);
  }

  /**
   * Moves each exchange whose copy finished to its next phase, then queues the copies that may start: phase 2 of
   * those whose phase 1 landed, then phase 1 of waiting ones, oldest first, while a slot and a spare row are free.
   * Returns the exchanges that landed, in landing order. Never waits.
   */
  advance(steps: MoveSteps<M>): RowExchange[] {
    const changed = new Set<number>();
    const freed: { layer: number; row: number }[] = [];
    const second: M[] = [];
    const landed: RowExchange[] = [];
    for (const m of [...this.moves]) {
      if (m.phase === 0 || !steps.copyDone(m)) continue;
      this.copiesQueued--;
      if (m.phase === 1) {
        steps.landIn(m);
        second.push(m);
      } else {
        freed.push({ layer: m.layer, row: steps.landOut(m) });
        this.moves.splice(this.moves.indexOf(m), 1);
        landed.push({ layer: m.layer, hotRow: m.hotRow, coldRow: m.coldRow });
      }
      changed.add(m.layer);
    }
    if (changed.size > 0) {
      steps.landed(changed);
      for (const f of freed) this.spareRows[f.layer]!.push(f.row);
    }
    for (const m of second) {
      m.phase = 2;
      steps.copyOut(m);
      this.copiesQueued++;
    }
    for (const m of this.moves) {
      if (this.copiesQueued >= this.copiesInFlight) break;
      if (m.phase !== 0) continue;
      const row = this.spareRows[m.layer]!.shift();
      if (row === undefined) continue;
      m.spare = row;
      m.phase = 1;
      steps.copyIn(m);
      this.copiesQueued++;
    }
    return landed;
  }
}

/** A move of a model of the banks (the simulator's): the step its last copy was queued at. */
export interface ModelledMove extends PipelineMove {
  queuedAt: number;
}

/**
 * The steps of a model of the banks whose copies are done by the next step (`now()`, the current step, has passed
 * the one each was queued at); `land` makes an exchange's map change when its second copy lands, as the banks'
 * slotOf does. Which row is spare does not matter to a model.
 */
export function nextStepCopies<M extends ModelledMove>(now: () => number, land: (m: M) => void): MoveSteps<M> {
  return {
    copyDone: (m) => m.queuedAt < now(),
    copyIn: (m) => { m.queuedAt = now(); },
    landIn: () => {},
    copyOut: (m) => { m.queuedAt = now(); },
    landOut: (m) => { land(m); return m.spare; },
    landed: () => {},
  };
}
