// The exchanges a caller has requested from a backend's banks and not yet seen land, by row: what it needs to
// keep requesting moves without naming a row in flight (the banks refuse that), and to wait for them.
import type { ExpertBanks, RowExchange } from './backend.ts';

export class MovesInFlight {
  private flying: RowExchange[] = [];

  constructor(private readonly banks: ExpertBanks) {}

  get size(): number {
    return this.flying.length;
  }

  /** Whether a requested exchange still holds hot row `hotRow` or cold row `coldRow` of `layer`. */
  busy(layer: number, hotRow: number, coldRow: number): boolean {
    return this.flying.some((f) => f.layer === layer && (f.hotRow === hotRow || f.coldRow === coldRow));
  }

  request(x: RowExchange): void {
    this.banks.requestSwap(x.layer, x.hotRow, x.coldRow);
    this.flying.push({ layer: x.layer, hotRow: x.hotRow, coldRow: x.coldRow });
  }

  /** As request, after waiting for the moves on its rows to land (a restore plan chains swaps through rows). */
  requestWhenFree(x: RowExchange): RowExchange[] {
    const landed: RowExchange[] = [];
    while (this.busy(x.layer, x.hotRow, x.coldRow)) landed.push(...this.settle());
    this.request(x);
    return landed;
  }

  /** The requested exchanges that landed since the last call (banks.takeLanded, between steps). */
  settle(): RowExchange[] {
    const landed = this.banks.takeLanded();
    for (const x of landed) {
      const i = this.flying.findIndex((f) => f.layer === x.layer && f.hotRow === x.hotRow && f.coldRow === x.coldRow);
      if (i >= 0) this.flying.splice(i, 1);
    }
    return landed;
  }

  /** Waits (polling the banks) until every move in flight has landed; returns them. */
  drain(): RowExchange[] {
    const landed: RowExchange[] = [];
    while (this.banks.moving > 0) landed.push(...this.settle());
    landed.push(...this.settle());
    return landed;
  }
}
