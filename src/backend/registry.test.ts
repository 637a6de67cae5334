// Backend selection: names are checked, and the cuda backend reports NOT_AVAILABLE (not a crash) where no
// NVIDIA driver can be loaded, so the package keeps working on CPU-only machines.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../errors.ts';
import { createBackend, parseBackendName } from './registry.ts';
import { syntheticModel } from './cpu/synthetic.ts';

test('parseBackendName accepts cpu and cuda, names the flag otherwise', () => {
  assert.equal(parseBackendName('cpu'), 'cpu');
  assert.equal(parseBackendName('cuda'), 'cuda');
  assert.throws(() => parseBackendName('tpu'), (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_ARGUMENT' && /--backend/.test(e.message));
});

test('createBackend: cpu works; cuda without a loadable libcuda is NOT_AVAILABLE', async () => {
  const { spec, weights } = syntheticModel();
  const cpu = await createBackend('cpu', { spec, weights, raw: new Map() });
  assert.equal(cpu.name, 'cpu');
  cpu.dispose();
  const saved = process.env['RESIDENCY_LIBCUDA'];
  process.env['RESIDENCY_LIBCUDA'] = '/nonexistent/libcuda.so.1';
  try {
    await assert.rejects(createBackend('cuda', { spec, weights, raw: new Map() }), (e: unknown) => e instanceof ResidencyError && e.code === 'NOT_AVAILABLE');
  } finally {
    if (saved === undefined) delete process.env['RESIDENCY_LIBCUDA'];
    else process.env['RESIDENCY_LIBCUDA'] = saved;
  }
});

test('createBackend: --host-experts on the cpu backend is refused by name (it computes every expert on the host already)', async () => {
  const { spec, weights } = syntheticModel();
  await assert.rejects(createBackend('cpu', { spec, weights, raw: new Map() }, { hostExperts: {} }),
    (e: unknown) => e instanceof ResidencyError && e.code === 'BAD_ARGUMENT' && /--host-experts: the host expert lane is the cuda backend's/.test(e.message));
});
