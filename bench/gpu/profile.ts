// A short fixed workload for profilers (ncu): a 64-token prompt, then --steps decode steps at batch 1 launched
// eagerly (so each kernel is its own launch), with the backend's tuning from --tuning JSON (e.g. '{"pdl":false}').
// The model: --model DIR (a make-checkpoint folder), else tiny-moe.
//   node dist/profile-gpu.mjs [--model DIR] [--steps 8] [--tuning JSON]   (built by `npm run build`)
import { parseArgs } from 'node:util';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCuda } from '../../src/backend/cuda/create.ts';
import { bySequence } from '../../src/backend/sequences.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

const { values } = parseArgs({ options: { model: { type: 'string', default: 'models/tiny-moe' }, steps: { type: 'string', default: '8' }, tuning: { type: 'string', default: '{}' } } });
const m = await loadModelFor(values.model, 'cuda');
const be = bySequence(await createCuda(m, { maxModelLen: 512, maxNumSeqs: 1, tuning: { ...(JSON.parse(values.tuning) as object), graphs: false } }));
be.openSequence(0, 512);
const prompt = Array.from({ length: 64 }, (_, i) => (i * 7919 + 13) % m.spec.vocabSize);
be.forward({ chunks: [{ seq: 0, tokens: prompt, startPos: 0 }], count: false });
const steps = Number(values.steps);
for (let s = 0; s < steps; s++) be.forward({ chunks: [{ seq: 0, tokens: [prompt[s % 64]!], startPos: 64 + s }], count: true });
console.log(`profile: ${values.model}, ${steps} decode steps at batch 1, eager, tuning ${values.tuning}`);
be.dispose();
m.tensors.close();
