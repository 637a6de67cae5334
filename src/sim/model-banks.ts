// Expert banks without weights: where each expert lives, for the simulator and the tests that hold it against the
// engine. TableBanks exchange rows at once (as the CPU banks do); PipelineBanks move them in the background on the CUDA
// banks' schedule (../backend/move-pipeline.ts), each row copy done by the next step boundary.
import { type ExpertBanks, type RowExchange } from '../backend/backend.ts';
import { InstantMoves } from '../backend/instant-moves.ts';
import { DEFAULT_SPARE_ROWS, MovePipeline, nextStepCopies, type ModelledMove } from '../backend/move-pipeline.ts';
import type { RowMap } from '../residency/rowmap.ts';

/** A row exchange with the step it happened after: [step, layer, hot row, cold row]. */
export type LoggedExchange = [step: number, layer: number, hotRow: number, coldRow: number];

/** Slot tables only, rows exchanged at once. Logs every exchange with the step it happened after (`step`, set by the caller). */
export class TableBanks implements ExpertBanks {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  readonly rows: { hot: number[]; cold: number[] }[];
  /** [layers * experts], 1 where the expert sits in the hot bank now. */
  readonly hot: Uint8Array;
  readonly log: LoggedExchange[] = [];
  step = -1;
  /** [layers * experts], each expert's physical slot (hot rows first): slotOf without a search. */
  private readonly slots: Int32Array;
  private readonly instant = new InstantMoves(this);

  constructor(map: RowMap) {
    this.layers = map.layers;
    this.experts = map.experts;
    this.hotPerLayer = map.hot_per_layer;
    this.rows = map.layers_map.map((r) => ({ hot: [...r.hot], cold: [...r.cold] }));
    this.hot = new Uint8Array(this.layers * this.experts);
    this.slots = new Int32Array(this.layers * this.experts);
    this.rows.forEach((r, l) => {
      r.hot.forEach((e, i) => { this.slots[l * this.experts + e] = i; this.hot[l * this.experts + e] = 1; });
      r.cold.forEach((e, i) => { this.slots[l * this.experts + e] = this.hotPerLayer + i; });
    });
  }

  slotOf(layer: number, expert: number): number { return this.slots[layer * this.experts + expert]!; }
  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number { return this.rows[layer]![bank][row]!; }

  swapRows(layer: number, hotRow: number, coldRow: number): void {
    const r = this.rows[layer]!;
    const leave = r.hot[hotRow]!, enter = r.cold[coldRow]!;
    r.hot[hotRow] = enter;
    r.cold[coldRow] = leave;
    const base = layer * this.experts;
    this.slots[base + enter] = hotRow;
    this.slots[base + leave] = this.hotPerLayer + coldRow;
    this.hot[base + enter] = 1;
    this.hot[base + leave] = 0;
    this.log.push([this.step, layer, hotRow, coldRow]);
  }

  requestSwap(layer: number, hotRow: number, coldRow: number): void { this.instant.request(layer, hotRow, coldRow); }
  takeLanded(): RowExchange[] { return this.instant.take(); }
  get moving(): number { return this.instant.moving; }
  get startable(): number { return this.instant.startable; }
  digest(): string { return JSON.stringify(this.rows); }
}

/** The same tables, moved in the background on the CUDA banks' schedule: `copiesInFlight` copies queued, each done by the next step. */
export class PipelineBanks extends TableBanks {
  private readonly pipeline: MovePipeline<ModelledMove>;
  private done: RowExchange[] = [];
  private readonly moveSteps = nextStepCopies<ModelledMove>(() => this.step, (m) => this.swapRows(m.layer, m.hotRow, m.coldRow));

  constructor(map: RowMap, copiesInFlight: number, spareRows = DEFAULT_SPARE_ROWS) {
    super(map);
    this.pipeline = new MovePipeline(Array.from({ length: map.layers }, () => Array.from({ length: spareRows }, (_, i) => i)), copiesInFlight);
  }

  override requestSwap(layer: number, hotRow: number, coldRow: number): void {
    const leave = this.expertAt(layer, 'hot', hotRow), enter = this.expertAt(layer, 'cold', coldRow);
    this.pipeline.request({ layer, hotRow, coldRow, leave, enter, spare: -1, phase: 0, queuedAt: this.step });
    this.done.push(...this.pipeline.advance(this.moveSteps));
  }

  override takeLanded(): RowExchange[] {
    this.done.push(...this.pipeline.advance(this.moveSteps));
    return this.done.splice(0);
  }

  override get moving(): number { return this.pipeline.moving; }
  override get startable(): number { return this.pipeline.startable; }
}
