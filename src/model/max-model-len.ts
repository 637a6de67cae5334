// --max-model-len (vLLM's name): the positions a sequence may hold, at most the model's own limit. The server and
// the CLI apply it to the loaded spec, which bounds requests and sizes the CUDA backend's KV cache.
import { ResidencyError } from '../errors.ts';
import type { ModelSpec } from './spec.ts';

/** The spec with maxPositions lowered to --max-model-len (refused above the model's own limit). */
export function withMaxModelLen(spec: ModelSpec, maxModelLen: number | undefined): ModelSpec {
  if (maxModelLen === undefined) return spec;
  if (maxModelLen > spec.maxPositions) {
    throw new ResidencyError('BAD_ARGUMENT', `--max-model-len ${maxModelLen} is over the model's max_position_embeddings (${spec.maxPositions})`);
  }
  return Object.freeze({ ...spec, maxPositions: maxModelLen });
}
