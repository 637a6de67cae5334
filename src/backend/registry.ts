// Backend selection by name (`--backend cpu|cuda`). The cuda backend is imported lazily so that the
// package runs where koffi, libcuda or the compiled kernels are absent.
import { ResidencyError } from '../errors.ts';
import type { Backend } from './backend.ts';
import type { BankPlacement } from './cpu/banks.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { ModelWeights, RawTensor } from '../model/weights.ts';

export const BACKEND_NAMES = ['cpu', 'cuda'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

export interface BackendModel {
  readonly spec: ModelSpec;
  readonly raw: ReadonlyMap<string, RawTensor>;
  readonly weights: ModelWeights;
}

export interface CreateBackendOptions {
  readonly placement?: BankPlacement;
  /** cuda: replay CUDA graphs (default true). */
  readonly graphs?: boolean;
}

export function parseBackendName(v: string): BackendName {
  if ((BACKEND_NAMES as readonly string[]).includes(v)) return v as BackendName;
  throw new ResidencyError('BAD_ARGUMENT', `--backend: expected one of ${BACKEND_NAMES.join(', ')}, got '${v}'`);
}

export async function createBackend(name: string, model: BackendModel, opts: CreateBackendOptions = {}): Promise<Backend> {
  const which = parseBackendName(name);
  if (which === 'cpu') {
    const { CpuBackend } = await import('./cpu/cpu-backend.ts');
    return new CpuBackend(model.spec, model.weights, opts.placement ? { placement: opts.placement } : {});
  }
  const { createCudaBackend } = await import('./cuda/cuda-backend.ts');
  return createCudaBackend(model, { ...(opts.placement ? { placement: opts.placement } : {}), ...(opts.graphs !== undefined ? { graphs: opts.graphs } : {}) });
}
