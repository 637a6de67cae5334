// DeepSeek-V3 in block FP8 on the CPU backend: deepseek-v3-tiny's linears quantized into [128, 128] blocks as
// make-checkpoint.py's fp8_block does (the hub format: every 2-D linear weight F8_E4M3 with a float32
// weight_scale_inv beside it; norms, embed_tokens, lm_head and the router as they were), computed from the
// stored format (MLA's projections, o_proj, the dense MLP, the shared expert, the routed experts) and
// bit-identical to the float32 model over the dequantized values; a residency round trip on it; a dense MLP
// mixing FP8 and float matrices refused by name.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dequantize, isQuantized, type Fp8Matrix, type Matrix } from '../src/model/quant.ts';
import { loadModel } from '../src/model/load.ts';
import { loadModelFor } from '../src/backend/load-for.ts';
import type { ModelWeights } from '../src/model/weights.ts';
import { float32Bytes as float32CopyBytes, heldBytes } from '../src/model/weight-bytes.ts';
import { createCpuBackend, type CpuBackendOptions } from '../src/backend/cpu/cpu-backend.ts';
import { recordFresh } from '../src/backend/cpu/test-helpers.ts';
import { simdAvailable } from '../src/backend/cpu/wasm/kernel.ts';
import { rejectsWith } from '../src/model/test-helpers.ts';
import { roundTrip } from './parity-harness.ts';
import { BLOCK, HUB_FP8, writeTwins } from './fp8-twin.ts';
import { familyCheckpoint } from '../fixtures/fixture-paths.ts';

const SRC = familyCheckpoint('deepseek-v3-tiny');
const HOT = 24;
const MiB = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;

/** Every linear of every layer: MLA's four, o_proj, and the dense MLP's or the shared and routed experts' matrices. */
function linears(w: ModelWeights): [string, Matrix][] {
  return w.layers.flatMap((l, i) => {
    const mla = l.mla!;
    const mlp = (p: string, e: { gate: Matrix; up: Matrix; down: Matrix } | undefined): [string, Matrix][] =>
      e ? [[`${p}.gate`, e.gate], [`${p}.up`, e.up], [`${p}.down`, e.down]] : [];
    return [
      [`${i}.qA`, mla.qA], [`${i}.qB`, mla.qB], [`${i}.kvA`, mla.kvA], [`${i}.kvB`, mla.kvB], [`${i}.oProj`, l.oProj],
      ...mlp(`${i}.dense`, l.dense), ...mlp(`${i}.shared`, l.shared), ...l.experts.flatMap((e, x) => mlp(`${i}.experts[${x}]`, e)),
    ] as [string, Matrix][];
  });
}

describe('deepseek-v3-tiny in block FP8 on the CPU backend', () => {
  let root = '';
  const fp8Dir = (): string => join(root, 'fp8');
  const f32Dir = (): string => join(root, 'f32');
  before(async () => {
    root = mkdtempSync(join(tmpdir(), 'residency-ds-fp8-'));
    for (const d of ['fp8', 'f32', 'mixed', 'mixed-f32']) mkdirSync(join(root, d));
    await writeTwins(SRC, fp8Dir(), f32Dir(), HUB_FP8);
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  it('keeps every linear as stored (blocks of 128 x 128, partial ones included), dequantizing to the float32 twin exactly', async (t) => {
    const [q, f] = await Promise.all([loadModel(fp8Dir(), { raw: false }), loadModel(f32Dir(), { raw: false })]);
    assert.deepEqual(q.spec.quantization, { method: 'fp8', blockSize: BLOCK, notConvert: [] });
    const ql = linears(q.weights);
    const fl = new Map(linears(f.weights));
    assert.equal(ql.length, 4 * 5 + 3 + 3 * 3 + 3 * 3 * 32);
    for (const [name, m] of ql) {
      assert.ok(isQuantized(m) && m.format === 'fp8', `${name} kept as block FP8`);
      assert.deepEqual((m as Fp8Matrix).block, BLOCK);
      assert.deepEqual(Buffer.from(dequantize(m).buffer), Buffer.from((fl.get(name) as Float32Array).buffer), name);
    }
    // kv_a_proj_with_mqa is [48][128]: one partial block; kv_b [256][32]: two partial blocks.
    assert.equal((q.weights.layers[0]!.mla!.kvA as Fp8Matrix).scales.length, 1);
    assert.equal((q.weights.layers[0]!.mla!.kvB as Fp8Matrix).scales.length, 2);
    const l1 = q.weights.layers[1]!;
    for (const a of [l1.router, l1.correctionBias, l1.inputNorm, l1.mla!.qANorm, l1.mla!.kvANorm, q.weights.embed, q.weights.lmHead]) assert.ok(a instanceof Float32Array);
    const [held, copy] = [heldBytes(q.weights), float32CopyBytes(q.weights)];
    assert.equal(copy, heldBytes(f.weights));
    assert.ok(held < copy);
    t.diagnostic(`weights held ${MiB(held)} (FP8 linears as stored) vs a float32 copy ${MiB(copy)}`);
  });

  it('logits, routing and counts bit-identical to the float32 model over the dequantized weights (1 and 2 threads, SIMD on and off, the CLI load)', async () => {
    const batches = [[[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12]], [[5, 6]], [[42]]];
    const sched = { swapsPerStep: 2, seed: 3, token: (f: number, i: number, s: number) => f * 31 + i * 7 + s, counted: () => true };
    const run = async (dir: string, opts: CpuBackendOptions, cli = false) => {
      const { spec, weights } = cli ? await loadModelFor(dir, 'cpu') : await loadModel(dir, { raw: false });
      const r = await recordFresh(spec, weights, { ...opts, placement: { hotPerLayer: HOT } }, batches, 4, sched);
      return { steps: r.steps, counter: r.counter };
    };
    const want = await run(f32Dir(), { threads: 1, simd: false });
    const configs: [CpuBackendOptions, boolean][] = [[{ threads: 1, simd: false }, false], [{ threads: 2, simd: false }, false], [{ threads: 1, simd: false }, true]];
    if (simdAvailable()) configs.push([{ threads: 1, simd: true }, false], [{ threads: 2, simd: true }, true]);
    for (const [opts, cli] of configs) {
      const got = await run(fp8Dir(), opts, cli);
      assert.equal(got.steps.length, want.steps.length);
      got.steps.forEach((s, i) => assert.ok(s.equals(want.steps[i]!), `step ${i} differs (${JSON.stringify(opts)}${cli ? ', CLI load' : ''})`));
      assert.ok(got.counter.equals(want.counter), 'counter');
    }
  });

  it('residency round trip: swaps keep the logits, restore gives back the boot digest', async (t) => {
    const { swaps, restoreSwaps } = await roundTrip(fp8Dir(), HOT);
    t.diagnostic(`${swaps} random swaps, restored in ${restoreSwaps}`);
  });

  it('a dense MLP mixing FP8 and float matrices is refused by name', async () => {
    const up = 'model.layers.0.mlp.up_proj';
    await writeTwins(SRC, join(root, 'mixed'), join(root, 'mixed-f32'), { ...HUB_FP8, modules_to_not_convert: [up] }, (n) => n === `${up}.weight`);
    const { spec, weights } = await loadModel(join(root, 'mixed'), { raw: false });
    await rejectsWith(() => createCpuBackend(spec, weights), 'UNSUPPORTED_MODEL', /layers\[0\]\.dense: gate, up and down are fp8, float32, fp8; .*modules_to_not_convert/);
  });
});
