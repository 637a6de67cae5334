// The CUDA backend's resource ownership without a GPU, on a fake driver that counts live handles: a
// construction that fails at any acquisition or any driver call leaves nothing behind and rethrows the
// original error; create + use + dispose leaves nothing behind; dispose is idempotent and survives a
// failing release.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import { expectedTensors, layerTensorNames } from '../../model/architecture.ts';
import type { RawTensor } from '../../model/weights.ts';
import { syntheticModel } from '../cpu/synthetic.ts';
import { CudaBackend, type CudaBackendOptions } from './cuda-backend.ts';
import { FakeCudaDriver, type FakeFailures } from './driver/fake-driver.ts';
import { KERNEL_GROUPS } from './driver/kernels.ts';
import { mapTensorSource } from '../../model/tensor-source.ts';
import { bySequence } from '../sequences.ts';
import type { ReleaseFailure } from './driver/resource-scope.ts';

// The fake driver ignores fatbin contents, but the backend reads one file per kernel group.
const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-lifecycle-'));
for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
after(() => rmSync(kernelDir, { recursive: true, force: true }));

// Small but complete: 2 layers, 8 experts (5 hot, so cold banks exist), shapes the kernels accept (the experts'
// 16 units padded to the kernels' 32), untied head (one more upload).
const { spec } = syntheticModel({ hiddenSize: 64, headDim: 32, numHeads: 2, numKvHeads: 1, expertIntermediate: 16, numExperts: 8, topK: 2, tieWordEmbeddings: false });
function rawTensors(override?: { name: string; dtype: RawTensor['dtype'] }): Map<string, RawTensor> {
  const raw = new Map<string, RawTensor>();
  for (const [name, shape] of expectedTensors(spec)) {
    const dtype = override?.name === name ? override.dtype : 'BF16';
    const n = shape.reduce((a, b) => a * b, 1);
    raw.set(name, { name, dtype, shape, bytes: new Uint8Array(n * (dtype === 'F32' ? 4 : 2)) });
  }
  return raw;
}
const raw = rawTensors();

function build(fail: FakeFailures = {}, extra: CudaBackendOptions = {}, tensors = raw) {
  const d = new FakeCudaDriver(fail);
  const releaseFailures: ReleaseFailure[] = [];
  const opts: CudaBackendOptions = { kernelDir, placement: { hotPerLayer: 5 }, onReleaseFailure: (f) => releaseFailures.push(f), ...extra };
  let backend: CudaBackend | null = null;
  let error: unknown = null;
  try {
    backend = new CudaBackend(d, spec, mapTensorSource(tensors), opts);
  } catch (e) {
    error = e;
  }
  return { d, backend, error, releaseFailures };
}

/** Opens two sequences, prefills, decodes greedily (captures graphs), closes one: every kind of handle. */
function exercise(raw: CudaBackend): void {
  const b = bySequence(raw);
  b.openSequence(1, 16);
  b.openSequence(2, 16);
  b.forward({ chunks: [{ seq: 1, tokens: [1, 2, 3], startPos: 0 }, { seq: 2, tokens: [4], startPos: 0 }], count: true, recordRouting: true });
  b.forward({ chunks: [{ seq: 1, tokens: [5], startPos: 3 }, { seq: 2, tokens: [6], startPos: 1 }], count: true, argmaxOnly: true });
  b.closeSequence(2);
  b.banks.swapRows(0, 0, 0);
  b.readCounter();
}

// How many acquisitions and calls one successful construction makes (the loops below fail each in turn).
const clean = build();
assert.ok(clean.backend, `clean construction failed: ${String(clean.error)}`);
const ACQUISITIONS = clean.d.acquisitions;
const CALLS = clean.d.calls;
clean.backend.dispose();

test('create + dispose leaves no live handle', () => {
  const { d, backend, releaseFailures } = build();
  assert.ok(backend);
  // Two streams: the compute stream and the banks' copy stream (moves; there is a cold bank).
  assert.ok(d.liveByKind().module === Object.keys(KERNEL_GROUPS).length && d.liveByKind().stream === 2);
  backend.dispose();
  assert.deepEqual(d.liveByKind(), {});
  assert.deepEqual(releaseFailures, []);
});

test('create + sequences + graphs + swaps + dispose leaves no live handle; the stream is waited on first, destroyed after the buffers, modules last', () => {
  const { d, backend, releaseFailures } = build();
  assert.ok(backend);
  exercise(backend);
  assert.ok((d.liveByKind().graph ?? 0) >= 1, 'a graph was captured');
  const mark = d.log.length;
  backend.dispose();
  assert.deepEqual(d.liveByKind(), {});
  assert.deepEqual(releaseFailures, []);
  const order = d.log.slice(mark);
  assert.equal(order[0], 'sync', 'dispose waits for the stream before freeing');
  const last = (re: RegExp): number => order.findLastIndex((x) => re.test(x));
  const first = (re: RegExp): number => order.findIndex((x) => re.test(x));
  assert.ok(last(/^-graph/) < first(/^-module/), 'graphs destroyed before their modules are unloaded');
  assert.ok(last(/^-(device|host)/) < last(/^-stream/), 'buffers freed before the compute stream (the last) is destroyed');
  assert.ok(last(/^-stream/) < first(/^-module/), 'modules unloaded last');
});

test('dispose twice releases nothing twice; use after dispose is refused', () => {
  const { d, backend, releaseFailures } = build();
  assert.ok(backend);
  exercise(backend);
  backend.dispose();
  const releases = d.releases;
  backend.dispose();
  assert.equal(d.releases, releases);
  assert.deepEqual(releaseFailures, []);
  assert.throws(() => backend.forward({ chunks: [{ seq: 1, tokens: [1], startPos: 4 }], count: false, argmaxOnly: true }), (e: unknown) => e instanceof ResidencyError && e.code === 'INTERNAL');
});

test(`failing each of the ${ACQUISITIONS} acquisitions of a construction in turn leaves no live handle and rethrows that failure`, () => {
  assert.ok(ACQUISITIONS > 20, `only ${ACQUISITIONS} acquisitions counted`);
  for (let n = 1; n <= ACQUISITIONS; n++) {
    const { d, backend, error, releaseFailures } = build({ acquisition: n });
    assert.equal(backend, null, `acquisition ${n}: constructed anyway`);
    assert.ok(d.injected !== null && error === d.injected, `acquisition ${n}: got ${String(error)} instead of the injected error`);
    assert.deepEqual(d.liveByKind(), {}, `acquisition ${n} (${d.injected.message}) leaked`);
    assert.deepEqual(releaseFailures, []);
  }
});

test(`failing each of the ${CALLS} driver calls of a construction in turn (uploads, lookups too) leaves no live handle`, () => {
  for (let n = 1; n <= CALLS; n++) {
    const { d, backend, error } = build({ call: n });
    assert.equal(backend, null, `call ${n}: constructed anyway`);
    assert.ok(d.injected !== null && error === d.injected, `call ${n}: got ${String(error)} instead of the injected error`);
    assert.deepEqual(d.liveByKind(), {}, `call ${n} (${d.injected.message}) leaked`);
  }
});

test('a tensor that is not as stored in bf16 is refused naming it, and leaves no live handle', () => {
  const last = layerTensorNames(spec.numLayers - 1);
  for (const name of [last.expert(spec.numExperts - 1).down, last.router, 'lm_head.weight']) {
    const { d, backend, error } = build({}, {}, rawTensors({ name, dtype: 'F32' }));
    assert.equal(backend, null);
    assert.ok(error instanceof ResidencyError && error.code === 'UNSUPPORTED_MODEL' && error.message.includes(name), String(error));
    assert.deepEqual(d.liveByKind(), {}, `${name}: leaked`);
  }
});

test('a release that fails during dispose is reported and every other handle is still released', () => {
  for (const k of [1, 5, 20]) {
    const { d, backend, releaseFailures } = build();
    assert.ok(backend);
    exercise(backend);
    d.fail = { release: d.releases + k }; // the k-th release of dispose
    assert.doesNotThrow(() => backend.dispose());
    assert.equal(releaseFailures.length, 1, `release ${k}`);
    assert.match(String((releaseFailures[0]!.error as Error).message), /injected at release/);
    assert.equal(d.live.size, 1, `release ${k}: only the handle whose release failed is left`);
  }
});
