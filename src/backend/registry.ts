// Backend selection by name (`--backend cpu|cuda`). The cuda backend is imported lazily so that the
// package runs where koffi, libcuda or the compiled kernels are absent.
import { ResidencyError } from '../errors.ts';
import type { Backend, KvCacheDtype } from './backend.ts';
import type { BankPlacement } from './slot-tables.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { ModelWeights, RawTensor } from '../model/weights.ts';
import type { TensorSource } from '../model/tensor-source.ts';

export const BACKEND_NAMES = ['cpu', 'cuda'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

export interface BackendModel {
  readonly spec: ModelSpec;
  readonly raw: ReadonlyMap<string, RawTensor>;
  readonly weights: ModelWeights;
  /** The stored tensors on demand (the cuda backend streams them); default: `raw`. */
  readonly tensors?: TensorSource;
}

export interface CreateBackendOptions {
  readonly placement?: BankPlacement;
  /** cuda: replay CUDA graphs (default true). */
  readonly graphs?: boolean;
  /** cpu: worker threads sharing each step by rows (bit-identical to 1); 'auto' = one per core (max 8). */
  readonly threads?: number | 'auto';
  /**
   * cpu: the backend takes the routed experts from `model.weights` (one copy in host memory; the model then
   * serves no second backend). For callers that loaded the model for this backend alone.
   */
  readonly takeExperts?: boolean;
  /** cuda: share of the device's memory to use (weights, KV cache, workspace; default 0.9). */
  readonly gpuMemoryUtilization?: number;
  /** cuda: sequences with a KV cache at once (the scheduler's running batch). */
  readonly maxNumSeqs?: number;
  /** cuda: upload progress in bytes. */
  readonly onProgress?: (done: number, total: number, what: string) => void;
  /** cuda: the host expert lane (threads absent: the CPUs less 2; share absent: chosen from measured times, host-lane/split.ts). */
  readonly hostExperts?: { readonly threads?: number; readonly share?: number; readonly parts?: number };
  /**
   * The paged KV cache (--block-size, --kv-cache-dtype, --kv-cache-memory / --kv-cache-tokens); 'auto' = float32 on
   * the cpu (the spec), bfloat16 on cuda.
   */
  readonly kvCache?: { readonly blockSize?: number; readonly dtype?: KvCacheDtype | 'auto'; readonly tokens?: number; readonly bytes?: number };
}

/** Parses a `--threads` value: a count in 1..64 or `auto`. */
export function parseThreads(text: string): number | 'auto' {
  if (text.trim() === 'auto') return 'auto';
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < 1 || n > 64) {
    throw new ResidencyError('BAD_ARGUMENT', `--threads '${text}': expected an integer in 1..64 or 'auto'`);
  }
  return n;
}

export function parseBackendName(v: string): BackendName {
  if ((BACKEND_NAMES as readonly string[]).includes(v)) return v as BackendName;
  throw new ResidencyError('BAD_ARGUMENT', `--backend: expected one of ${BACKEND_NAMES.join(', ')}, got '${v}'`);
}

export async function createBackend(name: string, model: BackendModel, opts: CreateBackendOptions = {}): Promise<Backend> {
  const which = parseBackendName(name);
  if (which === 'cpu') {
    if (opts.hostExperts) throw new ResidencyError('BAD_ARGUMENT', '--host-experts: the host expert lane is the cuda backend\'s (the cpu backend computes every expert on the host already)');
    const { CpuBackend } = await import('./cpu/cpu-backend.ts');
    const { autoThreads } = await import('./cpu/parallel/threads.ts');
    const threads = opts.threads === 'auto' ? autoThreads() : opts.threads;
    const kv = opts.kvCache;
    const backend = new CpuBackend(model.spec, model.weights, {
      ...(opts.placement ? { placement: opts.placement } : {}),
      ...(threads !== undefined ? { threads } : {}),
      ...(opts.takeExperts ? { takeExperts: true } : {}),
      ...(kv ? { kvCache: { ...kv, dtype: kv.dtype === 'auto' || kv.dtype === undefined ? 'float32' : kv.dtype } } : {}),
    });
    await backend.ready(); // the first steps should not run on one thread while workers start
    return backend;
  }
  const { createCuda } = await import('./cuda/create.ts');
  return createCuda(model, {
    ...(opts.placement ? { placement: opts.placement } : {}),
    ...(opts.graphs !== undefined ? { tuning: { graphs: opts.graphs } } : {}),
    ...(opts.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: opts.gpuMemoryUtilization } : {}),
    ...(opts.maxNumSeqs !== undefined ? { maxNumSeqs: opts.maxNumSeqs } : {}),
    ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
    ...(opts.hostExperts ? { hostExperts: opts.hostExperts } : {}),
    // cuda: 'auto' keeps keys and values in bf16.
    ...(opts.kvCache ? { kvCache: { ...opts.kvCache, dtype: opts.kvCache.dtype === 'auto' || opts.kvCache.dtype === undefined ? 'bfloat16' : opts.kvCache.dtype } } : {}),
  });
}
