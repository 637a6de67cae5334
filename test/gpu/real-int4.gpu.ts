// A 4-bit make-checkpoint checkpoint ($REAL_CKPT_INT4: --format gptq, awq or ct-int4, e.g. qwen3-30b-a3b x 2 layers)
// on the CPU backend, the spec the INT4 kernels will be tested against, against make-checkpoint's transformers float32
// references of its dequantized weights: greedy tokens (flips only at reported near-ties) and the top-5 logits. Run on
// the GPU machine, where torch made the checkpoint; the CUDA backend refuses 4-bit models until its kernels exist.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModelFor } from '../../src/backend/load-for.ts';
import { createCpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { argmax } from '../../src/backend/argmax.ts';
import { bySequence } from '../../src/backend/sequences.ts';
import { report } from './model.gpu.ts';

interface RefCase { domain: string; prompt_ids: number[]; tokens: number[]; top5_ids: number[][]; top5_logits: number[][] }

const dir = process.env['REAL_CKPT_INT4'];
const skip = dir && existsSync(join(dir, 'refs.json')) ? false : 'REAL_CKPT_INT4 (a 4-bit make-checkpoint folder with refs.json) not set';

test('real shapes (4-bit, CPU): greedy tokens equal the transformers float32 references of the dequantized weights (near-ties reported)', { skip, timeout: 600_000 }, async () => {
  const refs = (JSON.parse(readFileSync(join(dir!, 'refs.json'), 'utf8')) as { cases: RefCase[] }).cases;
  const steps = refs[0]!.tokens.length;
  const m = await loadModelFor(dir!, 'cpu');
  assert.ok(['gptq', 'awq', 'compressed-tensors'].includes(m.spec.quantization?.method ?? ''), `${dir}: not a 4-bit checkpoint`);
  const raw = createCpuBackend(m.spec, m.weights, { threads: 12 });
  await raw.ready();
  const be = bySequence(raw);
  const V = m.spec.vocabSize;
  let mismatch = 0, maxTopErr = 0;
  const nearTies: string[] = [];
  // Prefill every case in one step, then teacher-forced decode steps, all cases batched.
  refs.forEach((c, i) => be.openSequence(i, c.prompt_ids.length + steps + 1));
  let o = be.forward({ chunks: refs.map((c, i) => ({ seq: i, tokens: c.prompt_ids, startPos: 0 })), count: false });
  for (let s = 0; s < steps; s++) {
    refs.forEach((c, i) => {
      const tok = argmax(o.logits, i * V, V);
      c.top5_ids[s]!.forEach((id, j) => { maxTopErr = Math.max(maxTopErr, Math.abs(o.logits[i * V + id]! - c.top5_logits[s]![j]!)); });
      if (tok !== c.tokens[s]) {
        mismatch++;
        nearTies.push(`case ${i} (${c.domain}) step ${s}: got ${tok}, ref ${c.tokens[s]}, ref top-2 margin ${(c.top5_logits[s]![0]! - c.top5_logits[s]![1]!).toFixed(5)}`);
      }
    });
    if (s === steps - 1) break;
    o = be.forward({ chunks: refs.map((c, i) => ({ seq: i, tokens: [c.tokens[s]!], startPos: c.prompt_ids.length + s })), count: true });
  }
  be.dispose();
  const line = `${m.spec.quantization!.method}: ${refs.length} cases x ${steps} steps, ${mismatch} token flips vs transformers [${nearTies.join('; ')}], top-5 logit err ${maxTopErr.toExponential(2)}`;
  report['realInt4Cpu'] = { dir, method: m.spec.quantization!.method, cases: refs.length, steps, mismatch, nearTies, maxTopErr };
  console.log(`# real size int4 (CPU): ${line}`);
  for (const t of nearTies) assert.ok(Number(t.split('margin ')[1]) < 0.05, `a flip away from a near-tie: ${t}`);
});
