// The residency driver: the engine's ResidencyHook for one Backend. Count, drain, decide, swap; between steps.
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import type { Backend } from '../backend/backend.ts';
import { mapFromBanks, placeMap } from '../backend/bank-map.ts';
import { ResidencyError } from '../errors.ts';
import { Controller, type DrainReport } from '../residency/controller.ts';
import { parseControl, printable, type ControlCommand, type ControlResult } from '../residency/control.ts';
import type { CountsDump } from '../residency/counts.ts';
import { ControlFileWatcher } from '../residency/control-watcher.ts';
import { saveCountsDump, saveCountsDumpIn } from '../residency/files.ts';
import { ownFileIdentities } from '../residency/folder-io.ts';
import { MapFile, removeStaleMapTemps, type MapRecord, type MapSource } from '../residency/map-file.ts';
import { FOLDER_FILES, isFolderFile, remoteDumpNameProblem } from '../residency/folder-files.ts';
import type { Budgets, Swap } from '../residency/policy.ts';
import { priorFromDump } from '../residency/prior.ts';
import type { RowMap } from '../residency/rowmap.ts';
import { drainLine, StepRing, swapLine, type SwapLine } from '../residency/telemetry.ts';
import { TelemetryWriter } from '../residency/telemetry-writer.ts';
import type { ResidencyHook, StepReport } from './residency-hook.ts';

export interface ResidencyDriverOptions {
  readonly backend: Backend;
  /** Serve with this map: the banks are brought to it before the first step. Default: what the banks hold. */
  readonly map?: RowMap;
  readonly budgets?: Partial<Budgets>;
  /**
   * A seed prior for the controller: a counts dump of this model (its cumulative table), weighed by
   * budgets.prior_picks_per_expert. Refused (BAD_COUNTS naming `source`, default "prior") unless its model and
   * geometry are the backend's. `source` is how the caller names it, e.g. "--prior DUMP.json".
   */
  readonly prior?: { readonly dump: CountsDump; readonly source?: string };
  /** Boot frozen, counting only, until a GO file or {"freeze": false}. Default true. */
  readonly frozen?: boolean;
  /** Folder for telemetry.jsonl, swaps.jsonl and steps.json; the control file and GO file default to it. */
  readonly dir?: string;
  /** Default: DIR/control.json when `dir` is given. */
  readonly controlPath?: string;
  /** Default: DIR/GO when `dir` is given. */
  readonly goPath?: string;
  /** Steps between polls of the control and GO files (a stat each). Default 8. */
  readonly pollEvery?: number;
  /** Steps kept in the per-step ring. Default 8192. */
  readonly ringSize?: number;
  /** Milliseconds between rewrites of steps.json while steps run (a killed process keeps its ring). Default 10 s. */
  readonly stepsFlushMs?: number;
  /**
   * How the map came about, for DIR/map.json and the boot records: 'resumed' (the caller read it from DIR/map.json),
   * '--map', or 'default'. Default: '--map' with `map`, else 'default'.
   */
  readonly mapSource?: MapSource;
  /** Milliseconds at least between background rewrites of DIR/map.json while moves land. Default 1 s. */
  readonly mapFlushMs?: number;
  readonly log?: (message: string) => void;
}

export class ResidencyDriver implements ResidencyHook {
  readonly controller: Controller;
  readonly ring: StepRing;
  lastDrain: DrainReport | null = null;
  private readonly backend: Backend;
  private readonly writer: TelemetryWriter | null;
  private readonly watcher: ControlFileWatcher | null;
  private readonly pollEvery: number;
  private readonly stepsFlushMs: number;
  private stepsFlushedAt = performance.now();
  private readonly mapFile: MapFile | null;
  readonly mapSource: MapSource;
  private readonly mapFlushMs: number;
  private mapWrittenAt = -Infinity;
  /** Moves landed since map.json was last asked to be written. */
  private mapDirty = false;
  private readonly log: (message: string) => void;
  /** When each swap in flight was requested (hrtime), by layer/hotRow/coldRow. */
  private readonly requestedAt = new Map<string, bigint>();

  constructor(private readonly opts: ResidencyDriverOptions) {
    this.backend = opts.backend;
    this.log = opts.log ?? ((m) => console.error(`residency: ${m}`));
    const model = opts.backend.spec.name;
    // The prior is checked before the banks are touched: a refused one leaves them as they were.
    const banks = opts.backend.banks;
    const prior = opts.prior
      ? priorFromDump(opts.prior.dump, { models: [...new Set([model, ...(opts.map ? [opts.map.model] : [])])], layers: banks.layers, experts: banks.experts }, opts.prior.source)
      : undefined;
    if (opts.map) {
      const moved = placeMap(opts.backend.banks, model, opts.map);
      if (moved > 0) this.log(`placed map ${opts.map.model}: ${moved} row exchanges`);
    }
    const boot = opts.map ?? mapFromBanks(opts.backend.banks, model);
    this.controller = new Controller({
      boot, budgets: opts.budgets, frozen: opts.frozen ?? true, initialSnapshot: opts.backend.readCounter(), ...(prior ? { prior } : {}),
    });
    if (prior) this.log(`seed prior from ${opts.prior!.source ?? 'a counts dump'}: ${this.controller.budgets.prior_picks_per_expert} pseudo-picks per expert`);
    this.mapSource = opts.mapSource ?? (opts.map ? '--map' : 'default');
    this.writer = opts.dir
      ? new TelemetryWriter(opts.dir, this.log, { model, layers: banks.layers, experts: banks.experts, hot_per_layer: banks.hotPerLayer, frozen: this.controller.frozen, map_source: this.mapSource },
        { boot_map: this.controller.boot })
      : null;
    this.mapFlushMs = opts.mapFlushMs ?? 1000;
    this.mapFile = opts.dir ? new MapFile(opts.dir, this.log) : null;
    if (this.mapFile && opts.dir) {
      removeStaleMapTemps(opts.dir);
      // The run's starting map, at once: a restart before the first move resumes from it, not an older run's.
      this.mapFile.writeSync(this.mapRecord());
      this.mapWrittenAt = performance.now();
    }
    const controlPath = opts.controlPath ?? (opts.dir ? join(opts.dir, FOLDER_FILES.control) : undefined);
    const goPath = opts.goPath ?? (opts.dir ? join(opts.dir, FOLDER_FILES.go) : undefined);
    this.watcher = controlPath || goPath ? new ControlFileWatcher({ controlPath, goPath, log: this.log }) : null;
    this.pollEvery = opts.pollEvery ?? 8;
    this.stepsFlushMs = opts.stepsFlushMs ?? 10_000;
    this.ring = new StepRing(opts.ringSize ?? 8192);
  }

  /** Count: counting on, and a decode-like step (at most count_tmax tokens). */
  countStep(tokens: number): boolean {
    return this.controller.shouldCount(tokens);
  }

  /** Between steps: drain when due (and decide), then swap within the per-step budget, then poll control. */
  afterStep(report: StepReport): void {
    this.controller.onStep(report);
    if (this.controller.drainDue()) this.drainAndDecide(report.step);
    const t0 = process.hrtime.bigint();
    const swapped = this.swap(report.step);
    this.ring.push(report.step, report.durationNs, report.tokens, swapped, Number(process.hrtime.bigint() - t0));
    if (swapped > 0) this.mapDirty = true;
    this.flushMapWhenDue();
    if (this.writer && performance.now() - this.stepsFlushedAt >= this.stepsFlushMs) this.flushSteps();
    if (this.watcher && (report.step + 1) % this.pollEvery === 0) this.pollControl();
  }

  /** What DIR/map.json holds now: the map the banks hold, the run's boot map, the controller's counts. */
  mapRecord(): MapRecord {
    const ctl = this.controller;
    const counts = ctl.dumpCounts();
    return {
      v: 1, type: 'residency_map', run: this.writer?.run ?? '', time: new Date().toISOString(), step: counts.step, source: this.mapSource,
      swaps_applied: ctl.stats.applied, map: ctl.map(), boot_map: ctl.boot, counts,
    };
  }

  /** Lines and writes the residency folder could not take this run (a full disk): /metrics shows them. */
  get recordDrops(): { readonly telemetryLines: number; readonly swapLines: number; readonly mapWrites: number } | null {
    if (!this.writer) return null;
    return { telemetryLines: this.writer.dropped.telemetry, swapLines: this.writer.dropped.swaps, mapWrites: this.mapFile?.failures ?? 0 };
  }

  /** Resolves once no background write of map.json is running (tests, shutdown). */
  async mapSettled(): Promise<void> {
    await this.mapFile?.settled();
  }

  /** Moves landed and the last write of map.json is at least mapFlushMs old: write it again, in the background. */
  private flushMapWhenDue(): void {
    if (!this.mapFile || !this.mapDirty || performance.now() - this.mapWrittenAt < this.mapFlushMs) return;
    this.mapDirty = false;
    this.mapWrittenAt = performance.now();
    this.mapFile.write(() => this.mapRecord());
  }

  /**
   * The control API (the server exposes it): the same operations as the control file. `remote` (an HTTP
   * client): dump_counts must be a plain file name in the residency folder, written without following links
   * or making folders, and errors do not show the folder's path.
   */
  control(cmd: ControlCommand, opts: { readonly remote?: boolean } = {}): ControlResult {
    // A command is all or nothing: the dump (the state before the command) is written before anything
    // is applied, so a dump path that cannot be written leaves the controller exactly as it was.
    const parsed = parseControl(cmd);
    if (!parsed.ok) return parsed;
    const { dump_counts: dumpPath, ...rest } = parsed.command;
    let dump: { path: string; counts: CountsDump } | undefined;
    if (dumpPath !== undefined) {
      dump = { path: dumpPath, counts: this.controller.dumpCounts() };
      const written = opts.remote ? this.dumpRemote(dumpPath, dump.counts) : this.dumpLocal(dumpPath, dump.counts);
      if (written !== null) return { ok: false, error: written };
    }
    const result = this.controller.control(rest, this.backend.readCounter());
    if (!result.ok || !dump) return result;
    return { ok: true, changes: [`dump_counts -> ${dump.path}`, ...result.changes], dump };
  }

  /**
   * The control file's dump: anywhere, folders made, but never over the residency folder's own files, by
   * name (below) or by identity, whatever name reaches them (files.ts).
   */
  private dumpLocal(dumpPath: string, counts: CountsDump): string | null {
    const path = this.opts.dir && !isAbsolute(dumpPath) ? join(this.opts.dir, dumpPath) : dumpPath;
    if (this.opts.dir && resolve(dirname(path)) === resolve(this.opts.dir) && isFolderFile(basename(path))) {
      return `dump_counts: '${basename(path)}' is one of the residency folder's own files (${Object.values(FOLDER_FILES).join(', ')}); pick another name`;
    }
    try {
      saveCountsDump(path, counts, this.opts.dir ? ownFileIdentities(this.opts.dir) : undefined);
      return null;
    } catch (err) {
      return (err as Error).message;
    }
  }

  private dumpRemote(name: string, counts: CountsDump): string | null {
    if (!this.opts.dir) return 'dump_counts: this server has no residency folder (start it with --residency-dir DIR)';
    const problem = remoteDumpNameProblem(name);
    if (problem) return `dump_counts: ${problem}`;
    try {
      saveCountsDumpIn(this.opts.dir, name, counts, ownFileIdentities(this.opts.dir));
      return null;
    } catch (err) {
      return (err as Error).message;
    }
  }

  /** Reads the control and GO files now (afterStep does this every pollEvery steps); an idle server calls it, so a due map write happens too. */
  pollControl(): void {
    this.flushMapWhenDue();
    for (const event of this.watcher?.poll() ?? []) {
      if ('error' in event) continue; // the watcher logged the rejection; nothing changed
      const result = this.control(event.command);
      if (result.ok) this.log(`control ${event.source}: ${result.changes.join('; ') || 'no change'}`);
      else {
        this.watcher?.rejected(event);
        this.log(`control file ${event.source} rejected, nothing changed: ${printable(result.error)}`);
      }
    }
  }

  /**
   * The run ends: writes the step ring (steps.json) and the map (map.json, durably, now; no background write
   * lands after it) when there is a residency folder.
   */
  close(): void {
    this.flushSteps();
    this.mapFile?.writeSync(this.mapRecord(), { close: true });
  }

  /** Writes the step ring (steps.json) when there is a telemetry folder (afterStep does this every stepsFlushMs). */
  private flushSteps(): void {
    this.stepsFlushedAt = performance.now();
    this.writer?.steps(this.ring.dump());
  }

  private drainAndDecide(step: number): void {
    const drain = this.controller.drain(step, this.backend.readCounter());
    this.lastDrain = drain;
    this.writer?.drain(drainLine(drain, new Date()));
  }

  /**
   * Swap: the exchanges that landed since the last step join the map, then up to swaps_per_step queued swaps
   * are requested (stale-checked now; they land at a later step boundary, or at once on banks whose copies are
   * instant). Returns the swaps that landed. A swap line's apply_ns is its time from request to landing.
   */
  private swap(step: number): number {
    const lines: SwapLine[] = [];
    // After lines were dropped (a full disk), swaps.jsonl resyncs to the map as it was before this step's landings.
    const before = this.writer?.swapsNeedResync ? this.controller.map() : undefined;
    const banks = this.backend.banks;
    const now = (): bigint => process.hrtime.bigint();
    let landed = 0;
    const settle = (): void => {
      for (const x of banks.takeLanded()) {
        const s = this.controller.land(x.layer, x.hotRow, x.coldRow);
        const key = `${x.layer}/${x.hotRow}/${x.coldRow}`;
        const t0 = this.requestedAt.get(key);
        this.requestedAt.delete(key);
        if (this.writer) lines.push(swapLine(s, step, t0 === undefined ? 0 : Number(now() - t0), new Date()));
        landed++;
      }
    };
    settle();
    // No more than the banks start now: the rest wait in the controller's queue, where the next drain decides again.
    this.controller.requestSwaps(Math.min(this.controller.budgets.swaps_per_step, banks.startable), (s: Swap) => {
      banks.requestSwap(s.layer, s.hotRow, s.coldRow);
      this.requestedAt.set(`${s.layer}/${s.hotRow}/${s.coldRow}`, now());
    });
    settle(); // banks that move at once land here, in the step that asked
    this.writer?.swaps(lines, before);
    return landed;
  }
}

/**
 * For command lines: builds a driver once the backend exists, writing telemetry under `dir`, and writes the
 * step ring (steps.json) when the process exits.
 */
export function residencyHookFactory(opts: Omit<ResidencyDriverOptions, 'backend'>): (backend: Backend) => ResidencyDriver {
  return (backend) => {
    if (backend.banks.hotPerLayer >= backend.banks.experts) {
      throw new ResidencyError('BAD_ARGUMENT', 'the residency controller needs a cold bank: give --hot H (< experts) or --map MAP.json');
    }
    const driver = new ResidencyDriver({ ...opts, backend });
    process.once('exit', () => driver.close());
    return driver;
  };
}
