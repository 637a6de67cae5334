// The kernel choices that change speed, never results: one object with the defaults the product runs, which
// the benchmarks switch one at a time (bench/gpu/real-size.ts --ab). What each default bought is in
// docs/results.md.
import { ResidencyError } from '../../errors.ts';
import { ATTEND_MIN_BLOCKS } from './step/plan.ts';

export interface KernelTuning {
  /** Replay CUDA graphs for decode pieces (else launch each kernel eagerly). */
  readonly graphs: boolean;
  /** Programmatic dependent launch between the step's kernels. */
  readonly pdl: boolean;
  /** With PDL, dense gemvs and the expert down gemv issue their first weight loads before waiting for the kernel before. */
  readonly earlyWeights: boolean;
  /** Decode products' weight loads marked evict-first in L2 (each weight byte is read once a step). */
  readonly evictFirst: boolean;
  /**
   * Batch-1 decode: the expert down product adds its picks to the residual (the same bits as the residual+norm kernel)
   * and the next layer's input norm runs inside its q | k | v product, one launch a layer fewer.
   */
  readonly fuseResidual: boolean;
  /** The combining down product's features a warp (undefined: the fewest that keep it to one wave). */
  readonly combineRows: 1 | 2 | 4 | undefined;
  /** Batch 1, bf16: q | k | v split evenly over one wave of blocks where that is more blocks than R features a warp. */
  readonly oneWaveDense: boolean;
  /**
   * Decode attention: a piece's positions are split until it has this many blocks (rows x kv heads x splits), each
   * split keeping ATTEND_MIN_CHUNK positions (0: split only past ATTEND_CHUNK positions, so short rows need no merge).
   */
  readonly attendMinBlocks: number;
  /** Decode pieces of at least this many rows take the tensor-core products instead of the gemv (0: never). */
  readonly tensorCoreDecodeRows: number;
}

export const DEFAULT_TUNING: KernelTuning = {
  graphs: true,
  pdl: true,
  earlyWeights: true,
  evictFirst: true,
  fuseResidual: true,
  combineRows: undefined,
  oneWaveDense: true,
  attendMinBlocks: ATTEND_MIN_BLOCKS,
  tensorCoreDecodeRows: 16,
};

/** The defaults with `over` applied, checked (BAD_ARGUMENT naming the field). */
export function resolveTuning(over: Partial<KernelTuning> = {}): KernelTuning {
  const t = { ...DEFAULT_TUNING, ...over };
  if (!Number.isInteger(t.tensorCoreDecodeRows) || t.tensorCoreDecodeRows < 0) {
    throw new ResidencyError('BAD_ARGUMENT', `tuning.tensorCoreDecodeRows ${t.tensorCoreDecodeRows}: expected an integer >= 0`);
  }
  if (!Number.isInteger(t.attendMinBlocks) || t.attendMinBlocks < 0) {
    throw new ResidencyError('BAD_ARGUMENT', `tuning.attendMinBlocks ${t.attendMinBlocks}: expected an integer >= 0`);
  }
  if (t.combineRows !== undefined && ![1, 2, 4].includes(t.combineRows)) {
    throw new ResidencyError('BAD_ARGUMENT', `tuning.combineRows ${String(t.combineRows)}: expected 1, 2 or 4`);
  }
  return t;
}
