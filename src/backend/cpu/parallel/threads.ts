// How many threads the CPU backend uses when not told: RESIDENCY_CPU_THREADS (a count, or `auto`), else 1.
//
// Why 1 by default: threads win on a quiet machine, but each worker costs CPU time and memory to start from
// sources, and a machine whose other cores are busy loses (figures: docs/results.md, "CPU threads").
// Short-lived backends (tests build hundreds) should not pay that; long-lived ones (serve, generate,
// benchmarks) opt in with the option or the variable.
import { availableParallelism } from 'node:os';
import { ResidencyError } from '../../../errors.ts';
import { workersAvailable } from './entry.ts';

/** Most threads `auto` picks (measured up to 8 on a 16-core machine). */
const AUTO_MAX = 8;

/** `auto`: one thread per core up to AUTO_MAX, where workers can start (sources, or a bundle with its worker). */
export function autoThreads(): number {
  return workersAvailable() ? Math.max(1, Math.min(availableParallelism(), AUTO_MAX)) : 1;
}

export function resolveThreads(requested: number | undefined): number {
  if (requested !== undefined) return check(requested, 'threads', requested);
  const env = process.env.RESIDENCY_CPU_THREADS;
  if (env === undefined || env.trim() === '') return 1;
  if (env.trim() === 'auto') return autoThreads();
  return check(Number(env), 'RESIDENCY_CPU_THREADS', env);
}

function check(n: number, from: string, raw: unknown): number {
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    throw new ResidencyError('BAD_ARGUMENT', `${from} ${String(raw)}: expected an integer in [1, 64] (or RESIDENCY_CPU_THREADS=auto)`);
  }
  return n;
}
