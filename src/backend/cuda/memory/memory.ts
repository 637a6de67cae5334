// Device memory as vLLM users size it: --gpu-memory-utilization F of the device's memory is the budget; the
// weights, the KV cache reserved for max-model-len x max running sequences, and the step's workspace must fit
// in it, or the backend is refused before anything is allocated, with what would fit.
import { ResidencyError } from '../../../errors.ts';

export interface MemoryNeeds {
  /** Weights resident on the device (non-expert tensors and the hot bank). */
  readonly weights: number;
  /** KV cache bytes per position per sequence (every layer). */
  readonly kvPerPosition: number;
  readonly workspace: number;
}

export interface MemoryPlan {
  readonly budget: number;
  readonly total: number;
  readonly kv: number;
  readonly need: number;
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
}

/** Headroom for modules, graphs and the driver's own allocations. */
export const DEVICE_SLACK_BYTES = 512 * 1024 * 1024;

const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB`;

export function checkUtilization(f: number, flag = '--gpu-memory-utilization'): number {
  if (!Number.isFinite(f) || f <= 0 || f > 1) throw new ResidencyError('BAD_ARGUMENT', `${flag} ${f}: expected a fraction in (0, 1]`);
  return f;
}

export function planMemory(n: MemoryNeeds, total: number, utilization: number, maxModelLen: number, maxNumSeqs: number): MemoryPlan {
  checkUtilization(utilization);
  const budget = Math.floor(total * utilization);
  const kv = n.kvPerPosition * maxModelLen * maxNumSeqs;
  const need = n.weights + kv + n.workspace + DEVICE_SLACK_BYTES;
  if (need > budget) {
    const room = budget - n.weights - n.workspace - DEVICE_SLACK_BYTES;
    const fitLen = room > 0 ? Math.floor(room / (n.kvPerPosition * maxNumSeqs)) : 0;
    const fitSeqs = room > 0 ? Math.floor(room / (n.kvPerPosition * maxModelLen)) : 0;
    const hint = room <= 0
      ? `the weights and workspace alone need ${gib(n.weights + n.workspace + DEVICE_SLACK_BYTES)}: raise --gpu-memory-utilization or keep more experts in host memory (a lower --hot H)`
      : `would fit: --max-model-len ${fitLen} at ${maxNumSeqs} sequences, or ${fitSeqs} sequences at --max-model-len ${maxModelLen}`;
    throw new ResidencyError('BAD_ARGUMENT',
      `the model does not fit the GPU memory budget: it needs ${gib(need)} (weights ${gib(n.weights)}, KV cache ${gib(kv)} for --max-model-len ${maxModelLen} x ${maxNumSeqs} sequences, workspace ${gib(n.workspace + DEVICE_SLACK_BYTES)}) but --gpu-memory-utilization ${utilization} gives ${gib(budget)} of ${gib(total)}; ${hint}`);
  }
  return { budget, total, kv, need, maxModelLen, maxNumSeqs };
}

/**
 * The most hot experts per layer (0..experts) whose plan fits, largest first: `needsAt(h)` gives the needs with
 * h hot rows per layer. Throws planMemory's refusal (with what would fit) when not even h = 0 fits.
 */
export function hotExpertsThatFit(experts: number, needsAt: (hot: number) => MemoryNeeds, total: number, utilization: number,
  maxModelLen: number, maxNumSeqs: number): { hot: number; plan: MemoryPlan } {
  const fits = (h: number): MemoryPlan | null => {
    try {
      return planMemory(needsAt(h), total, utilization, maxModelLen, maxNumSeqs);
    } catch (e) {
      if (e instanceof ResidencyError && e.code === 'BAD_ARGUMENT') return null;
      throw e;
    }
  };
  const all = fits(experts);
  if (all) return { hot: experts, plan: all };
  if (!fits(0)) planMemory(needsAt(0), total, utilization, maxModelLen, maxNumSeqs); // throws its refusal
  let lo = 0, hi = experts; // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return { hot: lo, plan: fits(lo)! };
}
