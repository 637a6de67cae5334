// What each backend loads, so a process holds one copy of the weights, not two: the CPU backend the float32 weights
// (cpu/load-options.ts), not the raw shards beside them; the CUDA backend the stored tensors, streamed from the
// shards (it uploads them as stored; float32 copies would be twice the checkpoint). The CLI and server load this way.
import { loadModel, type LoadedModel, type LoadOptions } from '../model/load.ts';
import { cpuBf16Placement, cpuLoadOptions } from './cpu/load-options.ts';
import type { BackendName } from './registry.ts';

type BackendLoadOptions = Required<Pick<LoadOptions, 'weights' | 'raw' | 'stream'>> & Pick<LoadOptions, 'bf16' | 'streamExperts'>;

export function loadOptionsFor(backend: BackendName): BackendLoadOptions {
  return backend === 'cuda' ? { weights: false, raw: false, stream: true } : cpuLoadOptions();
}

/** loadModel with only the tensors `backend` uses (see loadOptionsFor). */
export function loadModelFor(dir: string, backend: BackendName, opts: Omit<LoadOptions, 'weights' | 'raw' | 'stream' | 'bf16' | 'streamExperts'> = {}): Promise<LoadedModel> {
  return loadModel(dir, { ...opts, ...loadOptionsFor(backend), ...(backend === 'cpu' ? cpuBf16Placement() : {}) });
}
