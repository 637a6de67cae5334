// The backend conformance suite (src/backend/backend.case.ts) on the CPU backend, one thread and two
// (RESIDENCY_CPU_SIMD=0 in npm test runs it again on the JS loops), on the shipped trained tiny-moe.
import { fileURLToPath } from 'node:url';
import { loadModel } from '../../model/load.ts';
import { runBackendConformance } from '../backend.case.ts';
import { CpuBackend } from './cpu-backend.ts';

const model = await loadModel(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url)));
const opts = { hot: 40, prompts: [[1, 400, 2035, 17], [3000, 12, 9], [77, 5, 600, 42, 8]], steps: 24, minLanded: 200 };
for (const threads of [1, 2]) {
  runBackendConformance(`cpu, ${threads} thread${threads > 1 ? 's' : ''}`, async (placement) => {
    const be = new CpuBackend(model.spec, model.weights, { threads, ...(placement ? { placement } : {}) });
    await be.ready();
    return be;
  }, opts);
}
