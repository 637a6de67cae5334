// How many threads the CPU backend uses when not told: RESIDENCY_CPU_THREADS, else the measured default.
import { availableParallelism } from 'node:os';
import { ResidencyError } from '../../../errors.ts';
import { workersAvailable } from './entry.ts';

/** The most threads the default picks (measured on the 2-core CI machine; see bench/cpu). */
const DEFAULT_MAX = 1;

export function resolveThreads(requested: number | undefined): number {
  const env = process.env.RESIDENCY_CPU_THREADS;
  const n = requested ?? (env !== undefined && env !== '' ? Number(env) : undefined);
  if (n === undefined) return workersAvailable() ? Math.max(1, Math.min(availableParallelism(), DEFAULT_MAX)) : 1;
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    const from = requested !== undefined ? 'threads' : 'RESIDENCY_CPU_THREADS';
    throw new ResidencyError('BAD_ARGUMENT', `${from} ${String(requested ?? env)}: expected an integer in [1, 64]`);
  }
  return n;
}
