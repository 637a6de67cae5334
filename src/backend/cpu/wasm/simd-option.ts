// Whether the CPU backend runs its linear layers through the wasm SIMD kernel: the option, else
// RESIDENCY_CPU_SIMD (1/0, true/false), else off (opt-in while it proves itself; README.md).
import { ResidencyError } from '../../../errors.ts';

export function resolveSimd(requested: boolean | undefined): boolean {
  if (requested !== undefined) return requested;
  const env = process.env.RESIDENCY_CPU_SIMD?.trim().toLowerCase();
  if (env === undefined || env === '' || env === '0' || env === 'false') return false;
  if (env === '1' || env === 'true') return true;
  throw new ResidencyError('BAD_ARGUMENT', `RESIDENCY_CPU_SIMD ${env}: expected 1 or 0 (true or false)`);
}
