// The live residency system (the engine's ResidencyDriver) as the server's ResidencyView.
import { ResidencyError } from '../errors.ts';
import type { StepReport } from '../engine/residency-hook.ts';
import type { ResidencyDriver } from '../engine/residency-driver.ts';
import type { ControlCommand } from '../residency/control.ts';
import type { ControlResult, ResidencySnapshot, ResidencyView } from './types.ts';

export class DriverView implements ResidencyView {
  private seenDrain: unknown = null;
  private picks = 0;
  private coldPicks = 0;
  private step = 0;

  constructor(private readonly driver: ResidencyDriver) {}

  /** Call after every engine step (EngineOptions.onStep): folds each new drain into the overall cold share. */
  onStep(report: StepReport): void {
    this.step = report.step + 1;
    const d = this.driver.lastDrain;
    if (d && d !== this.seenDrain) {
      this.seenDrain = d;
      this.picks += d.picks;
      this.coldPicks += d.coldPicks;
    }
  }

  snapshot(): ResidencySnapshot {
    const ctl = this.driver.controller;
    const d = this.driver.lastDrain;
    const drops = this.driver.recordDrops;
    const use: number[][] = [];
    let any = false;
    for (let l = 0; l < ctl.layers; l++) {
      const row: number[] = [];
      for (let e = 0; e < ctl.experts; e++) {
        const v = ctl.decayedCount(l, e);
        if (v > 0) any = true;
        row.push(v);
      }
      use.push(row);
    }
    return {
      map: ctl.map(),
      geometry: { layers: ctl.layers, experts: ctl.experts, hot_per_layer: ctl.hotPerLayer },
      cold_share: {
        overall: this.picks > 0 ? this.coldPicks / this.picks : null,
        window: d && d.picks > 0 ? d.coldShare : null,
        per_layer: d && d.picks > 0 ? d.coldShareByLayer : [],
      },
      swaps: { applied: ctl.stats.applied, refused: ctl.stats.refused, superseded: ctl.stats.superseded, queued: ctl.queueDepth, in_flight: ctl.inFlightCount },
      controller: {
        frozen: ctl.frozen, counting: ctl.counting, budgets: ctl.budgets, prior: ctl.hasPrior,
        drains: ctl.stats.drains, decided: ctl.stats.decided, cancelled: ctl.stats.cancelled,
        last_drain_step: d?.step ?? null,
      },
      // Decayed counts as of the last drain (zero until the first one: the heatmap starts dark).
      expert_use: any ? use : use.map((r) => r.map(() => 0)),
      step: this.step,
      ...(drops ? { records: { telemetry_lines_dropped: drops.telemetryLines, swap_lines_dropped: drops.swapLines, map_writes_failed: drops.mapWrites } } : {}),
    };
  }

  /**
   * The same path as the control file: the driver's control() runs the residency system's own parser,
   * so an unknown key or bad value is rejected here exactly as in control.json, and changes nothing.
   */
  control(command: unknown, opts: { readonly remote?: boolean } = {}): ControlResult {
    const r = this.driver.control(command as ControlCommand, opts);
    if (!r.ok) throw new ResidencyError('BAD_CONTROL', `control rejected, nothing changed: ${r.error}`);
    return r.dump ? { changes: r.changes, dump_path: r.dump.path } : { changes: r.changes };
  }
}
