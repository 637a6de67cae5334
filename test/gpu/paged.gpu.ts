// The paged-cache conformance suite (src/engine/paged.case.ts) on the CUDA backend, tiny-moe: block tables, chunked
// prefill, reuse after a cancellation, preemption and recompute, prefix hits and copy-on-write, the engine with
// prefix caching on and off; keys and values stored in float32, bf16 and fp8 e4m3 (kv-dtype.ts). The CUDA backend
// computes a chunked prefill and a whole one through different products (tensor cores, gemv), so logits agree within
// a bound rather than bit for bit; a value rounded to bf16 or fp8 one way or the other moves it further.
import { loadModel } from '../../src/model/load.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import { runPagedConformance, type PoolShape } from '../../src/engine/paged.case.ts';
import { modelDir } from './harness.ts';

const tiny = await loadModel(modelDir());
const prompts = [[1, 400, 2035, 17, 9], [3000, 12, 9, 5, 77, 600, 42, 8, 100, 101, 102, 103, 104], [77, 5, 600, 42, 8, 11, 12, 13, 14]];
const make = (pool: PoolShape) => createCuda(tiny, { maxModelLen: Math.min(256, pool.blocks * pool.blockSize), maxNumSeqs: 4, placement: { hotPerLayer: 40 }, kvCache: { blockSize: pool.blockSize, dtype: pool.dtype, tokens: pool.blocks * pool.blockSize } });
runPagedConformance('cuda, tiny-moe', make, { prompts, steps: 12, exact: false, tolerance: 2e-3, dtypes: ['float32'] });
runPagedConformance('cuda, tiny-moe', make, { prompts, steps: 12, exact: false, tolerance: 5e-2, dtypes: ['bfloat16'] });
runPagedConformance('cuda, tiny-moe', make, { prompts, steps: 12, exact: false, tolerance: 0.3, dtypes: ['fp8'] });
