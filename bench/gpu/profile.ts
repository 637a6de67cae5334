// A short fixed workload for profilers (ncu). Without --model: 30 decode steps at batch 1 on tiny-moe's fused
// row path, then 30 on the layered one. With --model DIR (a make-checkpoint folder): the op path, a 64-token
// prompt then --steps decode steps at batch 1 launched eagerly (so each kernel is its own launch for ncu), with
// the op path's launch options from --options JSON (e.g. '{"downCombine":false}').
//   node dist/profile-gpu.mjs [--model DIR] [--steps 8] [--options JSON]   (built by `npm run build`)
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { loadModel, loadModelFor } from '../../src/model/load.ts';
import { createCudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

const { values } = parseArgs({ options: { model: { type: 'string' }, steps: { type: 'string', default: '8' }, options: { type: 'string', default: '{}' } } });
if (values.model) {
  const m = await loadModelFor(values.model, 'cuda');
  const be = await createCuda(m, { path: 'op', graphs: false, maxModelLen: 512, maxNumSeqs: 1, ...(JSON.parse(values.options) as object) });
  const seqs = new DirectSequences(be);
  seqs.open(0, 512);
  const prompt = Array.from({ length: 64 }, (_, i) => (i * 7919 + 13) % m.spec.vocabSize);
  seqs.forward({ chunks: [{ seq: 0, tokens: prompt, startPos: 0 }], count: false });
  const steps = Number(values.steps);
  for (let s = 0; s < steps; s++) seqs.forward({ chunks: [{ seq: 0, tokens: [prompt[s % 64]!], startPos: 64 + s }], count: true });
  console.log(`profile: ${values.model} op path, ${steps} decode steps at batch 1, options ${values.options}`);
  be.dispose();
  m.tensors.close();
} else {
  const dir = existsSync('models/tiny-moe') ? 'models/tiny-moe' : (process.env['MOE_FIXTURE_DIR'] ?? '../shared/fixtures/tiny-moe');
  const m = await loadModel(dir, { weights: false });
  for (const fused of [true, false]) {
    const be = await createCudaBackend(m, { fused, graphs: false });
    be.openSequence(0, 256);
    let tok = [7];
    for (let s = 0; s < 30; s++) tok = Array.from(be.forward({ chunks: [{ seq: 0, tokens: tok, startPos: s }], count: true, argmaxOnly: true }).argmax!);
    console.log(`profile: ${fused ? 'fused' : 'layered'} 30 steps, last token ${tok[0]}`);
    be.dispose();
  }
}
