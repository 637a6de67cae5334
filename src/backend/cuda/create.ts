// Picks the CUDA path for a model: the row path (one block per token's layer: fastest for tiny models,
// limited to their shapes) when the shapes allow it, else the op path (real shapes). `path` forces one.
import type { Backend } from '../backend.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { loadDriver } from './driver.ts';
import { CudaBackend, tensorsOf, type CudaBackendOptions, type CudaModel } from './cuda-backend.ts';
import { CudaOpBackend, type OpBackendOptions } from './op/op-backend.ts';
import { checkCudaSupport } from './support.ts';
import { loadHostLaneLib, type HostExpertsOptions } from './host-experts.ts';
import { ResidencyError } from '../../errors.ts';

export type CudaPath = 'auto' | 'row' | 'op';

export interface CudaCreateOptions extends CudaBackendOptions, Omit<OpBackendOptions, 'hostExperts'> {
  readonly path?: CudaPath;
  /** The host expert lane (the op path's; its library is loaded here). */
  readonly hostExperts?: Omit<HostExpertsOptions, 'lib'>;
}

/** The row path computes this model (its shape limits hold; the default row block of 1024 threads). */
export function rowPathFits(spec: ModelSpec): boolean {
  if (spec.architecture !== 'qwen3_moe') return false;
  try {
    checkCudaSupport(spec, 1024, 128, false);
    return true;
  } catch {
    return false;
  }
}

export async function createCuda(model: CudaModel, opts: CudaCreateOptions = {}): Promise<Backend & { path?: string }> {
  const d = await loadDriver();
  const path = opts.path ?? 'auto';
  const { hostExperts, ...rest } = opts;
  if (hostExperts && path === 'row') throw new ResidencyError('BAD_ARGUMENT', '--host-experts: the row path has no host expert lane (the op path has)');
  if (path === 'row' || (path === 'auto' && !hostExperts && rowPathFits(model.spec))) return new CudaBackend(d, model.spec, tensorsOf(model), rest);
  return new CudaOpBackend(d, model.spec, tensorsOf(model), { ...rest, ...(hostExperts ? { hostExperts: { ...hostExperts, lib: await loadHostLaneLib() } } : {}) });
}
