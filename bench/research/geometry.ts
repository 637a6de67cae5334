// The big geometry: a DeepSeek-V4.1-Flash-like expert size on a stack that fits one H200 plus host RAM.
// Row = one SwiGLU expert, bf16: 3 * hidden * intermediate * 2 B = 18 MiB at 2048 x 1536.
// 16 layers x 295 hot rows = 83 GiB HBM; 16 x 89 cold rows = 25 GiB pinned host memory.
// A host mirror of every row (--moves mirror) is 16 x 384 rows = 108 GiB: run it with fewer --layers.
import { ResidencyError } from '../../src/errors.ts';

export interface TieredGeometry {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  readonly topK: number;
  readonly hidden: number;
  readonly intermediate: number;
  /** HBM staging rows for exchanges in flight (2 per exchange); 0 in mirror mode. */
  readonly stagingRows: number;
  /**
   * How a policy's moves are carried out (default 'exchange', rows.ts): 'mirror' (mirror-rows.ts) keeps a
   * host copy of every expert row (host bank of E rows per layer) and moves by one host->device copy.
   */
  readonly moves?: MoveMode;
  /** Moves in flight at most (mirror mode; exchange mode's limit is stagingRows / 2). */
  readonly movesInFlight?: number;
}

export type MoveMode = 'exchange' | 'mirror';

export const BIG: TieredGeometry = Object.freeze({
  layers: 16, experts: 384, hotPerLayer: 295, topK: 6, hidden: 2048, intermediate: 1536, stagingRows: 64,
});

/** A small geometry for the smoke check (same code paths, seconds to allocate). */
export const SMALL: TieredGeometry = Object.freeze({
  layers: 2, experts: 384, hotPerLayer: 295, topK: 6, hidden: 512, intermediate: 256, stagingRows: 8,
});

export function rowBytes(g: TieredGeometry): number {
  return 3 * g.hidden * g.intermediate * 2;
}

export function coldPerLayer(g: TieredGeometry): number {
  return g.experts - g.hotPerLayer;
}

export function moveMode(g: TieredGeometry): MoveMode {
  return g.moves ?? 'exchange';
}

/**
 * Rows per layer of the host bank (mapped pinned memory, read in place): the cold rows (E - H) for
 * exchanges, a mirror of every expert (E) for mirror moves. Slots H .. H + this - 1 address it.
 */
export function hostRowsPerLayer(g: TieredGeometry): number {
  return moveMode(g) === 'mirror' ? g.experts : coldPerLayer(g);
}

/** Moves in flight at most: 2 staging rows per exchange, or the mirror mode's own cap (default 32, BIG's depth). */
export function movesInFlight(g: TieredGeometry): number {
  return moveMode(g) === 'mirror' ? g.movesInFlight ?? 32 : Math.floor(g.stagingRows / 2);
}

/**
 * `g` with its moves carried out as `moves`. Mirror mode drops the staging rows and keeps their pipeline
 * depth (stagingRows / 2 moves in flight) as its cap, so deferred means the same in both modes.
 */
export function withMoves(g: TieredGeometry, moves: MoveMode): TieredGeometry {
  if (moveMode(g) === moves) return g;
  if (moves === 'mirror') return Object.freeze({ ...g, moves, stagingRows: 0, movesInFlight: Math.floor(g.stagingRows / 2) });
  const { movesInFlight: cap = 0, ...rest } = g;
  return Object.freeze({ ...rest, moves, stagingRows: 2 * cap });
}

/** Bytes of pinned host memory the host bank takes (all layers). */
export function hostBankBytes(g: TieredGeometry): number {
  return g.layers * hostRowsPerLayer(g) * rowBytes(g);
}

/**
 * The geometry main.ts runs: `base` cut to `layers` layers, moves as `moves`. Refuses a host bank above
 * `hostGib` GiB of pinned memory (the GPU host has 128 GiB; the full mirror would take 108).
 */
export function benchGeometry(base: TieredGeometry, o: { layers: number; moves: string; hostGib: number }): TieredGeometry {
  if (o.moves !== 'exchange' && o.moves !== 'mirror') throw new ResidencyError('BAD_ARGUMENT', `--moves '${o.moves}': expected exchange or mirror`);
  if (!Number.isInteger(o.layers) || o.layers < 1 || o.layers > base.layers) {
    throw new ResidencyError('BAD_ARGUMENT', `--layers ${o.layers}: expected an integer 1..${base.layers}`);
  }
  if (!(o.hostGib > 0)) throw new ResidencyError('BAD_ARGUMENT', `--host-gib ${o.hostGib}: expected a positive number of GiB`);
  const g = withMoves(o.layers === base.layers ? base : Object.freeze({ ...base, layers: o.layers }), o.moves);
  const gib = hostBankBytes(g) / 2 ** 30;
  if (g.moves === 'mirror' && gib > o.hostGib) {
    throw new ResidencyError('BAD_ARGUMENT', `--moves mirror pins ${g.layers} layers x ${g.experts} experts x ${(rowBytes(g) / 2 ** 20).toFixed(2)} MiB = ${gib.toFixed(1)} GiB of host memory, above --host-gib ${o.hostGib}: lower --layers (e.g. --layers ${Math.max(1, Math.floor(o.hostGib * 2 ** 30 / (g.experts * rowBytes(g))))}) or raise --host-gib`);
  }
  return g;
}
