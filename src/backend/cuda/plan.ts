// Host-side step planning for the graph path (pure, tested without a GPU): a step's chunks become
// sub-steps of one token per sequence, each padded to a captured batch-size bucket.
import { ResidencyError } from '../../errors.ts';
import type { SequenceChunk } from '../backend.ts';

export const DEFAULT_BUCKETS: readonly number[] = [1, 2, 4, 8, 16];

/** The smallest bucket holding n rows (buckets ascending). */
export function bucketFor(n: number, buckets: readonly number[]): number {
  for (const b of buckets) if (b >= n) return b;
  throw new ResidencyError('INTERNAL', `no graph bucket holds ${n} rows (largest ${buckets[buckets.length - 1]})`);
}

export interface PlannedRow {
  readonly chunk: number;
  /** Token index within the whole step, in chunk order (the routing record's row). */
  readonly tokenIndex: number;
  readonly seq: number;
  readonly token: number;
  readonly pos: number;
  /** This row is its chunk's last token: its logits are the chunk's output. */
  readonly last: boolean;
}

/**
 * Sub-steps: sub-step t feeds token t of every chunk still running (one row per sequence, so the rows of a
 * sub-step never depend on each other), split into groups of at most `maxRows`. Causality within a chunk
 * holds because sub-steps run in order.
 */
export function planSubsteps(chunks: readonly SequenceChunk[], maxRows: number): PlannedRow[][] {
  const starts: number[] = [];
  let total = 0;
  let longest = 0;
  for (const c of chunks) {
    starts.push(total);
    total += c.tokens.length;
    longest = Math.max(longest, c.tokens.length);
  }
  const out: PlannedRow[][] = [];
  for (let t = 0; t < longest; t++) {
    let cur: PlannedRow[] = [];
    chunks.forEach((c, ci) => {
      if (t >= c.tokens.length) return;
      cur.push({ chunk: ci, tokenIndex: starts[ci]! + t, seq: c.seq, token: c.tokens[t]!, pos: c.startPos + t, last: t === c.tokens.length - 1 });
      if (cur.length === maxRows) {
        out.push(cur);
        cur = [];
      }
    });
    if (cur.length > 0) out.push(cur);
  }
  return out;
}

/** Positions a row's attention reads before attn_route splits them (ATTN_SPLIT_MIN in kernels/common.cuh). */
export const ATTN_SPLIT_MIN = 256;
/** Target positions per split block (ATTN_CHUNK in kernels/common.cuh). */
export const ATTN_CHUNK = 128;

/**
 * attn_route's grid height for one bucket: the most blocks one row's positions may be split over. Enough
 * for chunks of ATTN_CHUNK positions at the longest context, but no more than the bucket's share of two
 * 1024-thread blocks per SM, so every split block of a step is resident at once. Fixed per bucket (a
 * captured graph keeps it); the kernel picks the split count per row from its position.
 */
export function attnMaxSplits(bucket: number, smCount: number, maxPositions: number): number {
  return Math.max(1, Math.min(Math.ceil(maxPositions / ATTN_CHUNK), Math.floor((2 * smCount) / bucket)));
}

/** The kernel's split rule (attn_splits in kernels/common.cuh) for `n` positions read: splits and chunk size. */
export function attnSplitsOf(n: number, maxSplits: number): { splits: number; chunk: number } {
  if (n <= ATTN_SPLIT_MIN || maxSplits <= 1) return { splits: 1, chunk: n };
  const s = Math.min(Math.ceil(n / ATTN_CHUNK), maxSplits);
  const chunk = Math.ceil(n / s);
  return { splits: Math.ceil(n / chunk), chunk };
}

/** Which attn_route grid a sub-step launches: the pre-split one (rows x 1) or the split one (rows x max splits). */
export type AttnGrid = 'short' | 'long';

/**
 * The attn_route grid of one sub-step from its rows' positions: 'long' (rows x maxSplits) only when some row
 * reads more than ATTN_SPLIT_MIN positions (pos + 1 > 256), else 'short' (rows x 1, exactly the launch before
 * the split: the 15 idle blocks per row a long grid adds cost ~2 us per layer at short contexts). A row that
 * crosses 256 positions mid-sequence moves its sub-steps to the long grid. maxSplits 1 (split off) is
 * always short. The kernel's own rule (attn_splits) still picks each row's split count inside the grid.
 */
export function attnGridFor(positions: readonly number[], maxSplits: number): { grid: AttnGrid; splits: number } {
  const long = maxSplits > 1 && positions.some((p) => p + 1 > ATTN_SPLIT_MIN);
  return long ? { grid: 'long', splits: maxSplits } : { grid: 'short', splits: 1 };
}
