// Replaying swaps.jsonl: from a run's boot map, each swap line exchanges its hot and cold rows (checked against
// the experts it names), and a resync line (written after dropped lines) resets the map. A whole record replays
// to the map the run ended at, which a restart uses to resume past the last map.json (map-file.ts).
import type { RowMap } from './rowmap.ts';
import type { SwapLine } from './telemetry.ts';

/** What replaying swaps.jsonl's last run gives: the map it ends at, and how well its lines agreed. */
export interface SwapReplay {
  /** The run replayed (its boot record's id), when it has one. */
  readonly run?: string;
  /** The map after every line (null: the boot record carries no boot_map, from before boot maps were recorded). */
  readonly map: RowMap | null;
  /** Swap lines replayed (after the last resync, if any: those before it are in the resync's map). */
  readonly swaps: number;
  /** Swap lines whose rows did not hold the experts they name (a gap in the file with no resync after it). */
  readonly inconsistent: number;
  readonly resyncs: number;
  /** Lines that did not parse (skipped); a torn last line (a kill mid-append) is not counted. */
  readonly broken: number;
}

/** Replays the last run of a swaps.jsonl text (the runs before its last boot record are passed over). */
export function replaySwapLog(text: string): SwapReplay {
  let rows: { hot: number[]; cold: number[] }[] | null = null;
  let head: Omit<RowMap, 'layers_map'> | null = null;
  let run: string | undefined;
  let swaps = 0, inconsistent = 0, resyncs = 0, broken = 0;
  const take = (m: RowMap) => {
    const { layers_map: layers, ...rest } = m;
    head = rest;
    rows = layers.map((r) => ({ hot: [...r.hot], cold: [...r.cold] }));
  };
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    let o: Record<string, unknown>;
    try { o = JSON.parse(line) as Record<string, unknown>; } catch {
      if (!(i === lines.length - 1 && !text.endsWith('\n'))) broken++;
      return;
    }
    if (o.type === 'boot') {
      swaps = inconsistent = resyncs = broken = 0;
      rows = null;
      run = typeof o.run === 'string' ? o.run : undefined;
      if (o.boot_map && typeof o.boot_map === 'object') take(o.boot_map as RowMap);
      return;
    }
    if (o.type === 'resync') {
      resyncs++;
      swaps = 0;
      take(o.map as RowMap);
      return;
    }
    if (!rows) return;
    const s = o as unknown as SwapLine;
    const at = (rows as { hot: number[]; cold: number[] }[])[s.layer];
    swaps++;
    if (!at || at.hot[s.hot_row] !== s.hot_expert || at.cold[s.cold_row] !== s.cold_expert) {
      inconsistent++;
      return;
    }
    at.hot[s.hot_row] = s.cold_expert;
    at.cold[s.cold_row] = s.hot_expert;
  });
  const map = rows && head ? { ...(head as Omit<RowMap, 'layers_map'>), layers_map: rows as { hot: number[]; cold: number[] }[] } as RowMap : null;
  return { ...(run ? { run } : {}), map, swaps, inconsistent, resyncs, broken };
}
