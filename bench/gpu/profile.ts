// A short fixed workload for profilers (ncu): 30 decode steps at batch 1 on the fused path, then 30 on
// the layered path. `node dist/profile-gpu.mjs` (built by `npm run build`).
import { existsSync } from 'node:fs';
import { loadModel } from '../../src/model/load.ts';
import { createCudaBackend } from '../../src/backend/cuda/cuda-backend.ts';

const dir = existsSync('models/tiny-moe') ? 'models/tiny-moe' : (process.env['MOE_FIXTURE_DIR'] ?? '../shared/fixtures/tiny-moe');
const m = await loadModel(dir, { weights: false });
for (const fused of [true, false]) {
  const be = await createCudaBackend(m, { fused, graphs: false });
  be.openSequence(0, 256);
  let tok = [7];
  for (let s = 0; s < 30; s++) tok = Array.from(be.greedyStep([{ seq: 0, tokens: tok, startPos: s }], true));
  console.log(`profile: ${fused ? 'fused' : 'layered'} 30 steps, last token ${tok[0]}`);
  be.dispose();
}
