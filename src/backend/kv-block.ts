// The paged KV cache's block: positions it holds by default (vLLM's 16), for every backend.
export const DEFAULT_BLOCK_SIZE = 16;
