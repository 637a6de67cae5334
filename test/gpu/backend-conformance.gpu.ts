// The backend conformance suite (src/backend/backend.case.ts) on the CUDA backend: tiny-moe (its experts padded to
// the kernels' 32-unit slices) and real shapes on $REAL_CKPT (a 2-layer make-checkpoint folder) when set.
import { existsSync } from 'node:fs';
import { loadModel } from '../../src/model/load.ts';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import { runBackendConformance } from '../../src/backend/backend.case.ts';
import { modelDir } from './harness.ts';

const tiny = await loadModel(modelDir());
// Moves land two step boundaries after their request at best: more spare rows and copies in flight than the
// defaults so that a short run still lands many.
const moves = { spareRows: 4, copiesInFlight: 16 };
const tinyOpts = { hot: 40, prompts: [[1, 400, 2035, 17], [3000, 12, 9], [77, 5, 600, 42, 8]], steps: 48, minLanded: 60 };
runBackendConformance('cuda, tiny-moe', (placement) => createCuda(tiny, { ...moves, kvCache: { tokens: 8192 }, ...(placement ? { placement } : {}) }), tinyOpts);
const real = process.env['REAL_CKPT'];
if (real && existsSync(real)) {
  const m = await loadModelFor(real, 'cuda');
  runBackendConformance('cuda, real shapes', (placement) => createCuda(m, { maxModelLen: 128, maxNumSeqs: 4, kvCache: { tokens: 2048 }, ...moves, ...(placement ? { placement } : {}) }),
    { hot: 64, prompts: [[1, 2, 3, 4, 5, 6, 7, 8], [100, 200, 300], [4000, 17, 2]], steps: 64, minLanded: 40 });
}
