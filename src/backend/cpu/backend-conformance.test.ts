// The backend conformance suite (src/backend/backend.case.ts) on the CPU backend, one thread and two
// (RESIDENCY_CPU_SIMD=0 in npm test runs it again on the JS loops), on the shipped trained tiny-moe; and on the
// CPU's other bank variants: bf16, block-FP8 and MXFP4 rows kept as stored, and a family with its own expert names.
import { fileURLToPath } from 'node:url';
import { loadModel } from '../../model/load.ts';
import { runBackendConformance } from '../backend.case.ts';
import { CpuBackend } from './cpu-backend.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

const model = await loadModel(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url)));
const opts = { hot: 40, prompts: [[1, 400, 2035, 17], [3000, 12, 9], [77, 5, 600, 42, 8]], steps: 24, minLanded: 200 };
for (const threads of [1, 2]) {
  runBackendConformance(`cpu, ${threads} thread${threads > 1 ? 's' : ''}`, async (placement) => {
    const be = new CpuBackend(model.spec, model.weights, { threads, ...(placement ? { placement } : {}) });
    await be.ready();
    return be;
  }, opts);
}

// bf16 kept as stored (RESIDENCY_CPU_BF16=stored; the default at real shapes): with SIMD its rows in the kernel's
// memory through the bf16 linear, two threads.
const stored = await loadModel(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url)), { raw: false, bf16: 'stored' });
runBackendConformance('cpu, bf16 kept as stored, 2 threads', async (placement) => {
  const be = new CpuBackend(stored.spec, stored.weights, { threads: 2, ...(placement ? { placement } : {}) });
  await be.ready();
  return be;
}, opts);

for (const [name, hot] of [['qwen3-moe-fp8-tiny', 12], ['gpt-oss-tiny-mxfp4', 12], ['mixtral-tiny', 6]] as const) {
  const m = await loadModel(familyCheckpoint(name));
  runBackendConformance(`cpu, ${name}`, async (placement) => {
    const be = new CpuBackend(m.spec, m.weights, { threads: 1, ...(placement ? { placement } : {}) });
    await be.ready();
    return be;
  }, { ...opts, hot, minLanded: 60 });
}
