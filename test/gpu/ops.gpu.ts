// Op-by-op device tests (as ggml's test-backend-ops): each kernel a step launches, run alone on fresh random inputs
// against its CPU twin (the spec), at the families' real shapes, in bf16, block FP8 and MXFP4; one line a case,
// `# op <kernel> <shape> <dtype>: normalized error X (bar Y)` (report.ts states the bars). Launched as the step
// launches them (src/backend/cuda/step/launches.ts). OPS_DRY=1 runs every case's host side on the fake driver
// (nothing compared): `OPS_DRY=1 node --import tsx --test test/gpu/ops.gpu.ts`.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { OpDevice } from './ops/device.ts';
import { Draw } from './ops/draw.ts';
import { FAMILIES } from './ops/shapes.ts';
import { cases, failures } from './ops/report.ts';
import { denseGemvCases, denseTcCases, denseVariantCases } from './ops/products.ts';
import { expertCases } from './ops/experts.ts';
import { attendCases, qkNormWholeCases, qkRopeKvCases } from './ops/attention.ts';
import { argmaxCases, residualNormCases } from './ops/norms.ts';
import { routingCases } from './ops/routing.ts';
import { mlaCases } from './ops/mla.ts';

let setup: Promise<{ dev: OpDevice; draw: Draw }> | null = null;
const ready = (): Promise<{ dev: OpDevice; draw: Draw }> => (setup ??= OpDevice.open().then((dev) => ({ dev, draw: new Draw('ops') })));

/** One group of cases: every case prints its line; the test fails on the group's cases over their bar. */
function group(name: string, run: (dev: OpDevice, draw: Draw) => void): void {
  test(`ops: ${name}`, async () => {
    const { dev, draw } = await ready();
    const from = cases.length;
    const t0 = Date.now();
    run(dev, draw);
    console.log(`# ops ${name}: ${cases.length - from} cases in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const bad = failures(from);
    assert.equal(bad.length, 0, `${bad.length} cases failed:\n${bad.join('\n')}`);
  });
}

// Every case's figures beside the device tests' report ($OUT/ops.json).
after(() => {
  const out = process.env['OUT'];
  if (!out || cases.length === 0) return;
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'ops.json'), JSON.stringify({ cases }, null, 1));
});

group('dense gemv (bf16 / FP8 / MXFP4 x B 1-16 x R 1, 2 x store, add, SwiGLU)', denseGemvCases);
group('dense gemv variants (one wave, normW, biases, FP8 grid cut by stacking, tiny-moe)', denseVariantCases);
group('dense tensor-core tiles', denseTcCases);
group('experts qwen3_moe bf16', (dev, draw) => expertCases(dev, draw, FAMILIES.qwen3, 11, true));
group('experts qwen3_moe FP8', (dev, draw) => expertCases(dev, draw, FAMILIES.qwen3Fp8, 11, false));
group('experts mixtral', (dev, draw) => expertCases(dev, draw, FAMILIES.mixtral, 3, false));
group('experts olmoe', (dev, draw) => expertCases(dev, draw, FAMILIES.olmoe, 11, false));
group('experts gpt-oss MXFP4', (dev, draw) => expertCases(dev, draw, FAMILIES.gptOss, 7, true));
group('experts deepseek-v3 FP8', (dev, draw) => expertCases(dev, draw, FAMILIES.deepseek, 9, true));
group('experts tiny-moe (padded 48 -> 64 units)', (dev, draw) => expertCases(dev, draw, FAMILIES.tiny, 9, true));
group('residual + norm, argmax', (dev, draw) => {
  argmaxCases(dev, draw);
  residualNormCases(dev, draw);
});
group('q/k norm, RoPE, KV write, attention, merge', (dev, draw) => {
  qkNormWholeCases(dev, draw);
  qkRopeKvCases(dev, draw);
  attendCases(dev, draw);
});
group('routing and grouping', routingCases);
group('latent attention (deepseek-v3)', mlaCases);
