// Whether the CPU backend runs its linear layers and experts through the wasm SIMD kernel: the option,
// else RESIDENCY_CPU_SIMD (1/0, true/false), else on wherever it can run (README.md says why: it is
// bit-identical to the JS loops, and faster; docs/results.md, "CPU kernels").
import { ResidencyError } from '../../../errors.ts';
import { MAX_PAGES } from './module.ts';
import { simdAvailable } from './kernel.ts';

/** Most bytes the kernel's memory can hold (32-bit addresses). */
export const SIMD_MAX_BYTES = MAX_PAGES * 65536;
/** The share of it a model's weights may fill (the rest: KV caches, scratch). */
export const SIMD_WEIGHT_BYTES = 0.75 * SIMD_MAX_BYTES;

/**
 * `needBytes`: what the backend would place in the wasm memory. Asked for explicitly (option or variable)
 * where it cannot run: a clear error; by default there: the JS path.
 */
export function resolveSimd(requested: boolean | undefined, needBytes: number): boolean {
  let asked = requested;
  if (asked === undefined) {
    const env = process.env.RESIDENCY_CPU_SIMD?.trim().toLowerCase();
    if (env === '0' || env === 'false') asked = false;
    else if (env === '1' || env === 'true') asked = true;
    else if (env !== undefined && env !== '') {
      throw new ResidencyError('BAD_ARGUMENT', `RESIDENCY_CPU_SIMD ${env}: expected 1 or 0 (true or false)`);
    }
  }
  if (asked === false) return false;
  // Leave a quarter for activations and scratch.
  const fits = needBytes <= SIMD_WEIGHT_BYTES;
  const runs = simdAvailable();
  if (asked === true && !runs) throw new ResidencyError('NOT_AVAILABLE', 'simd: this runtime lacks WebAssembly SIMD (set RESIDENCY_CPU_SIMD=0)');
  if (asked === true && !fits) {
    throw new ResidencyError('NOT_AVAILABLE', `simd: the model's expert banks and linear layers need ${needBytes} bytes of wasm memory, more than the ${SIMD_WEIGHT_BYTES} they may fill of its 4 GiB (32-bit addresses); set RESIDENCY_CPU_SIMD=0 for the JS loops`);
  }
  return runs && fits;
}
