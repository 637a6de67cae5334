// --gpu-memory-utilization and --max-model-len, shared by serve and generate (as vLLM spells them): the
// budget the cuda backend sizes itself in, and the positions a sequence may hold (which also bounds requests).
import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from '../model/spec.ts';
import { checkUtilization } from '../backend/cuda/op/memory.ts';

export const MEMORY_OPTIONS = {
  'gpu-memory-utilization': { type: 'string' },
  'max-model-len': { type: 'string' },
} as const;

export const MEMORY_HELP = `  --gpu-memory-utilization F  cuda: share of the GPU's memory for weights, KV cache and workspace (default 0.9);
                       a model that does not fit is refused with what would
  --max-model-len N    positions a sequence may hold, prompt + output (default: the model's max_position_embeddings);
                       cuda reserves the KV cache for N x the running batch`;

export interface MemoryFlags {
  readonly gpuMemoryUtilization?: number;
  readonly maxModelLen?: number;
}

export function parseMemoryFlags(values: { 'gpu-memory-utilization'?: string | boolean; 'max-model-len'?: string | boolean }): MemoryFlags {
  const out: { gpuMemoryUtilization?: number; maxModelLen?: number } = {};
  const u = values['gpu-memory-utilization'];
  if (typeof u === 'string') {
    const n = Number(u);
    if (u.trim() === '') throw new ResidencyError('BAD_ARGUMENT', `--gpu-memory-utilization '${u}': expected a fraction in (0, 1]`);
    out.gpuMemoryUtilization = checkUtilization(n);
  }
  const m = values['max-model-len'];
  if (typeof m === 'string') {
    const n = Number(m);
    if (m.trim() === '' || !Number.isInteger(n) || n < 2) throw new ResidencyError('BAD_ARGUMENT', `--max-model-len '${m}': expected an integer >= 2`);
    out.maxModelLen = n;
  }
  return out;
}

/** The spec with maxPositions lowered to --max-model-len (refused above the model's own limit). */
export function withMaxModelLen(spec: ModelSpec, maxModelLen: number | undefined): ModelSpec {
  if (maxModelLen === undefined) return spec;
  if (maxModelLen > spec.maxPositions) {
    throw new ResidencyError('BAD_ARGUMENT', `--max-model-len ${maxModelLen} is over the model's max_position_embeddings (${spec.maxPositions})`);
  }
  return Object.freeze({ ...spec, maxPositions: maxModelLen });
}
