// Device memory as vLLM users size it: --gpu-memory-utilization F of the device's memory is the budget. The weights
// outside the banks and the step's workspace come first; the hot bank and the paged KV pool share the rest. Either is
// fixed by its flag (--hot H: the pool takes the rest; --kv-cache-memory / --kv-cache-tokens: the bank takes the rest,
// in whole experts a layer); by default the pool keeps at least --max-model-len x min(4, --max-num-seqs) positions and
// the experts take the rest. A model that cannot fit is refused before anything is allocated, with what would fit.
import { ResidencyError } from '../../../errors.ts';

export interface MemoryNeeds {
  /** Weights resident on the device (non-expert tensors and the hot bank). */
  readonly weights: number;
  /** Bytes of one KV block (every layer's keys and values of blockSize positions, in the pool's dtype). */
  readonly bytesPerBlock: number;
  readonly blockSize: number;
  readonly workspace: number;
}

export interface MemoryPlan {
  readonly budget: number;
  readonly total: number;
  /** The KV pool: blocks and their bytes. */
  readonly kvBlocks: number;
  readonly kv: number;
  readonly need: number;
  readonly maxModelLen: number;
}

/** How the pool is sized: a fixed number of blocks, or what is left (at least `minBlocks`). */
export type PoolSize = { readonly blocks: number } | { readonly minBlocks: number };

/** Headroom for modules, graphs and the driver's own allocations. */
export const DEVICE_SLACK_BYTES = 512 * 1024 * 1024;

const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB`;

export function checkUtilization(f: number, flag = '--gpu-memory-utilization'): number {
  if (!Number.isFinite(f) || f <= 0 || f > 1) throw new ResidencyError('BAD_ARGUMENT', `${flag} ${f}: expected a fraction in (0, 1]`);
  return f;
}

/** The blocks the pool needs for `positions` positions. */
export const blocksFor = (positions: number, blockSize: number): number => Math.ceil(positions / blockSize);

/**
 * The plan for needs `n`: the pool fixed or given what the weights and workspace leave (refused below its minimum,
 * with what would fit).
 */
export function planMemory(n: MemoryNeeds, total: number, utilization: number, maxModelLen: number, pool: PoolSize): MemoryPlan {
  checkUtilization(utilization);
  const budget = Math.floor(total * utilization);
  const fixed = DEVICE_SLACK_BYTES + n.weights + n.workspace;
  const room = budget - fixed;
  const kvBlocks = 'blocks' in pool ? pool.blocks : Math.floor(Math.max(0, room) / n.bytesPerBlock);
  const least = 'blocks' in pool ? pool.blocks : pool.minBlocks;
  if (room < least * n.bytesPerBlock) {
    const positions = least * n.blockSize;
    const fitPositions = Math.max(0, Math.floor(room / n.bytesPerBlock)) * n.blockSize;
    const hint = room <= 0
      ? `the weights and workspace alone need ${gib(fixed)}: raise --gpu-memory-utilization or keep more experts in host memory (a lower --hot H)`
      : `${fitPositions} positions of KV cache would fit (--kv-cache-tokens ${fitPositions}, or a smaller --max-model-len), or fewer experts hot (a lower --hot H)`;
    throw new ResidencyError('BAD_ARGUMENT',
      `the model does not fit the GPU memory budget: weights ${gib(n.weights)}, workspace ${gib(n.workspace + DEVICE_SLACK_BYTES)} and a KV cache of ${positions} positions (${gib(least * n.bytesPerBlock)}${'blocks' in pool ? '' : `: --max-model-len ${maxModelLen} x min(4, --max-num-seqs)`}) need ${gib(fixed + least * n.bytesPerBlock)} but --gpu-memory-utilization ${utilization} gives ${gib(budget)} of ${gib(total)}; ${hint}`);
  }
  const kv = kvBlocks * n.bytesPerBlock;
  return { budget, total, kvBlocks, kv, need: fixed + kv, maxModelLen };
}

/**
 * The most hot experts per layer (0..experts) whose plan fits beside the pool's least size, largest first: `needsAt(h)`
 * gives the needs with h hot rows per layer; the pool then takes what is left (or its fixed size). Throws
 * planMemory's refusal (with what would fit) when not even h = 0 fits.
 */
export function hotExpertsThatFit(experts: number, needsAt: (hot: number) => MemoryNeeds, total: number, utilization: number,
  maxModelLen: number, pool: PoolSize): { hot: number; plan: MemoryPlan } {
  const fits = (h: number): MemoryPlan | null => {
    try {
      return planMemory(needsAt(h), total, utilization, maxModelLen, pool);
    } catch (e) {
      if (e instanceof ResidencyError && e.code === 'BAD_ARGUMENT') return null;
      throw e;
    }
  };
  const all = fits(experts);
  if (all) return { hot: experts, plan: all };
  if (!fits(0)) planMemory(needsAt(0), total, utilization, maxModelLen, pool); // throws its refusal
  let lo = 0, hi = experts; // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return { hot: lo, plan: fits(lo)! };
}
