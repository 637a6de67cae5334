// What the CPU backend asks of a load: float32 weights (quantized ones as stored) and no raw tensors, the routed
// experts left in the shards for its banks to read, bf16 kept as stored where float32 would be past the SIMD
// kernel's reach (RESIDENCY_CPU_BF16), and read straight into the kernel's memory so that a backend taking the
// weights computes on them in place. The model layer knows none of this: the options carry it.
import { ResidencyError } from '../../errors.ts';
import type { Bf16Choice, LoadOptions } from '../../model/load.ts';
import type { Bf16Memory } from '../../model/weights.ts';
import { WasmArena } from './wasm/arena.ts';
import { resolveSimd, SIMD_WEIGHT_BYTES } from './wasm/simd-option.ts';

/** RESIDENCY_CPU_BF16 (float32 | stored | auto), for the CPU backend's loads; unset: auto. */
export function bf16FromEnv(): Bf16Choice {
  const v = process.env.RESIDENCY_CPU_BF16?.trim().toLowerCase();
  if (v === undefined || v === '' || v === 'auto') return 'auto';
  if (v === 'float32' || v === 'stored') return v;
  throw new ResidencyError('BAD_ARGUMENT', `RESIDENCY_CPU_BF16 ${v}: expected float32, stored or auto`);
}

/** The tensors the CPU backend computes with. */
export function cpuLoadOptions(): Required<Pick<LoadOptions, 'weights' | 'raw' | 'stream' | 'bf16' | 'streamExperts'>> {
  return { weights: true, raw: false, stream: false, bf16: bf16FromEnv(), streamExperts: true };
}

/** Where bf16 kept as stored goes: the SIMD kernel's memory, and 'auto' decided against what that memory may hold. */
export function cpuBf16Placement(): Required<Pick<LoadOptions, 'bf16Memory' | 'bf16AutoBytes'>> {
  return { bf16Memory: kernelMemory, bf16AutoBytes: SIMD_WEIGHT_BYTES };
}

/** The CPU SIMD kernel's memory for bf16 matrices kept as stored, where the kernel runs (RESIDENCY_CPU_SIMD not 0). */
function kernelMemory(): Bf16Memory | undefined {
  return resolveSimd(undefined, 0) ? new WasmArena() : undefined;
}
