// Builds the CUDA backend for a loaded model: the driver, the host expert lane's library when asked for, the
// model's stored tensors.
import { ResidencyError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { mapTensorSource, type TensorSource } from '../../model/tensor-source.ts';
import type { RawTensor } from '../../model/weights.ts';
import { CudaBackend, type CudaBackendOptions } from './cuda-backend.ts';
import { loadDriver } from './driver/driver.ts';
import { loadHostLaneLib, type HostExpertsOptions } from './host-lane/lane.ts';

/** A model as the CUDA backend takes it: its spec and its stored tensors (streamed from the shards, or in memory). */
export interface CudaModel {
  readonly spec: ModelSpec;
  readonly tensors?: TensorSource;
  readonly raw?: ReadonlyMap<string, RawTensor>;
}

export interface CudaCreateOptions extends Omit<CudaBackendOptions, 'hostExperts'> {
  /** The host expert lane (its library is loaded here). */
  readonly hostExperts?: Omit<HostExpertsOptions, 'lib'>;
}

/** The stored tensors of a model: its source, or its raw map as one. */
export function tensorsOf(model: CudaModel): TensorSource {
  if (model.tensors) return model.tensors;
  if (model.raw) return mapTensorSource(model.raw);
  throw new ResidencyError('INTERNAL', 'cuda backend: the model has neither a tensor source nor raw tensors');
}

export async function createCuda(model: CudaModel, opts: CudaCreateOptions = {}): Promise<CudaBackend> {
  const d = await loadDriver();
  const { hostExperts, ...rest } = opts;
  return new CudaBackend(d, model.spec, tensorsOf(model), { ...rest, ...(hostExperts ? { hostExperts: { ...hostExperts, lib: await loadHostLaneLib() } } : {}) });
}
