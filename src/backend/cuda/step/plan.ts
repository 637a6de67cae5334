// Host-side planning of a step (pure, tested without a GPU): a step's chunks become pieces of at most
// `maxRows` rows (every token of every chunk, in chunk order: a prefill chunk runs as one batch, not as
// repeated decode steps) with at most `maxOut` rows whose logits are wanted; decode pieces are padded to a
// graph bucket; attention splits its positions when few rows read many.
import { ResidencyError } from '../../../errors.ts';
import type { SequenceChunk } from '../../backend.ts';

/** Decode graph buckets: a decode piece is padded to the smallest that holds it. */
export const DEFAULT_BUCKETS: readonly number[] = [1, 2, 4, 8, 16];

/** The smallest bucket holding n rows (buckets ascending). */
export function bucketFor(n: number, buckets: readonly number[]): number {
  for (const b of buckets) if (b >= n) return b;
  throw new ResidencyError('INTERNAL', `no graph bucket holds ${n} rows (largest ${buckets[buckets.length - 1]})`);
}

export interface OpRow {
  readonly chunk: number;
  /** Token index within the whole step, in chunk order (the routing record's row). */
  readonly tokenIndex: number;
  readonly seq: number;
  readonly token: number;
  readonly pos: number;
}

export interface OpPiece {
  readonly rows: readonly OpRow[];
  /** Row index (within the piece) of each output, and the chunk it answers for. */
  readonly outs: readonly { row: number; chunk: number }[];
}

export function planPieces(chunks: readonly SequenceChunk[], maxRows: number, maxOut: number): OpPiece[] {
  const pieces: OpPiece[] = [];
  let rows: OpRow[] = [];
  let outs: { row: number; chunk: number }[] = [];
  const flush = (): void => {
    if (rows.length > 0) pieces.push({ rows, outs });
    rows = [];
    outs = [];
  };
  let tokenIndex = 0;
  chunks.forEach((c, ci) => {
    if (outs.length >= maxOut) flush();
    c.tokens.forEach((token, i) => {
      if (rows.length >= maxRows) flush();
      if (i === c.tokens.length - 1) outs.push({ row: rows.length, chunk: ci });
      rows.push({ chunk: ci, tokenIndex: tokenIndex++, seq: c.seq, token, pos: c.startPos + i });
    });
  });
  flush();
  return pieces;
}

/** Rows at most in a piece run by the decode products (gemv) and replayed as a graph. */
export const DECODE_MAX_ROWS = 16;
/** Positions one attention block reads at most before a decode row's positions are split. */
export const ATTEND_CHUNK = 256;

/** Attention blocks a decode piece aims for (rows x kv heads x splits) before it stops splitting short rows. */
export const ATTEND_MIN_BLOCKS = 32;
/** Positions a split reads at least. */
export const ATTEND_MIN_CHUNK = 16;

/**
 * Splits of the positions for a piece, a power of two up to maxSplits (so a few graphs cover every context):
 * decode pieces split until no block reads more than ATTEND_CHUNK positions, and further while the piece has
 * fewer than `minBlocks` (ATTEND_MIN_BLOCKS) blocks and a split keeps ATTEND_MIN_CHUNK positions (batch 1 has only as many
 * rows x kv heads as there are kv heads: one block per SM would leave the chip idle); prefill pieces have rows
 * enough.
 */
export function attendSplits(rows: number, maxPos: number, maxSplits: number, kvHeads = 1, minBlocks = ATTEND_MIN_BLOCKS): number {
  if (rows > DECODE_MAX_ROWS) return 1;
  const n = maxPos + 1;
  let s = 1;
  while (s < maxSplits && n / s > ATTEND_CHUNK) s *= 2;
  while (s < maxSplits && rows * kvHeads * s < minBlocks && n / (2 * s) >= ATTEND_MIN_CHUNK) s *= 2;
  return s;
}

/**
 * Output features per warp of a gemv launch: 2 when that still gives every SM two blocks, else 1 (aiming at more
 * blocks a SM ran slower: docs/results.md).
 */
export function gemvRowsPerWarp(O: number, groups: number, smCount: number): 1 | 2 {
  return Math.ceil(O / 16) * groups >= 2 * smCount ? 2 : 1;
}

/** Blocks a SM the batch-1 bf16 gemv entries are compiled for (GEMV_MIN_BLOCKS in gemv.cuh): one wave is this x SMs. */
export const GEMV_B1_BLOCKS_PER_SM = 4;

/**
 * Output features per warp of the combining down product (a block: R features of every pick): the fewest of 1, 2, 4
 * that keep its blocks within one wave at `blocksPerSm` blocks a SM, so no second partial wave trails.
 */
export function combineRowsPerWarp(O: number, smCount: number, blocksPerSm = GEMV_B1_BLOCKS_PER_SM): 1 | 2 | 4 {
  for (const R of [1, 2] as const) if (Math.ceil(O / R) <= blocksPerSm * smCount) return R;
  return 4;
}

/**
 * Blocks along the features of a gemv whose O features are split evenly over the grid's warps (the _even entries):
 * as many as fill one wave of `blocksPerSm` a SM over `groups` groups, but at least enough that no warp takes more than
 * R features and at most one a feature for every warp.
 */
export function oneWaveFeatureBlocks(O: number, groups: number, R: number, smCount: number, blocksPerSm = GEMV_B1_BLOCKS_PER_SM): number {
  const fewest = Math.ceil(O / (8 * R)), most = Math.ceil(O / 8);
  return Math.min(most, Math.max(fewest, Math.floor((blocksPerSm * smCount) / groups)));
}
