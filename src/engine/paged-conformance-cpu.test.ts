// The paged-cache conformance suite (paged.case.ts) on the CPU backend: tiny-moe with one thread and
// two (the workers read the block tables too; RESIDENCY_CPU_SIMD=0 in npm test runs it again on the JS loops), in
// float32, bf16 and fp8 KV; DeepSeek-V3's latent attention and gpt-oss's sliding windows with sinks on their
// family fixtures.
import { loadModel } from '../model/load.ts';
import { runPagedConformance } from './paged.case.ts';
import { CpuBackend } from '../backend/cpu/cpu-backend.ts';
import { TINY_MOE_MODEL, familyCheckpoint } from '../../fixtures/fixture-paths.ts';

const prompts = [[1, 400, 2035, 17, 9], [3000, 12, 9, 5, 77, 600, 42, 8, 100, 101, 102, 103, 104], [77, 5, 600, 42, 8, 11, 12, 13, 14]];
const model = await loadModel(TINY_MOE_MODEL);
for (const threads of [1, 2]) {
  runPagedConformance(`cpu, tiny-moe, ${threads} thread${threads > 1 ? 's' : ''}`, async (pool) => {
    const be = new CpuBackend(model.spec, model.weights, { threads, placement: { hotPerLayer: 40 }, kvCache: pool });
    await be.ready();
    return be;
  }, { prompts, steps: 12, exact: true, dtypes: threads === 1 ? ['float32', 'bfloat16', 'fp8'] : ['bfloat16'] });
}

for (const name of ['deepseek-v3-tiny', 'gpt-oss-tiny-mxfp4'] as const) {
  const m = await loadModel(familyCheckpoint(name));
  runPagedConformance(`cpu, ${name}`, async (pool) => new CpuBackend(m.spec, m.weights, { threads: 1, kvCache: pool }), { prompts, steps: 12, exact: true, dtypes: ['float32', 'bfloat16'] });
}
