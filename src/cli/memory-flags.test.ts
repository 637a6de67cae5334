import { it } from 'node:test';
import assert from 'node:assert/strict';
import { parseMemoryFlags } from './memory-flags.ts';
import { withMaxModelLen } from '../model/max-model-len.ts';
import type { ModelSpec } from '../model/spec.ts';

it('--gpu-memory-utilization and --max-model-len: parsed, refused naming the flag, N lowers the positions', () => {
  assert.deepEqual(parseMemoryFlags({ 'gpu-memory-utilization': '0.9', 'max-model-len': '8192' }), { gpuMemoryUtilization: 0.9, maxModelLen: 8192 });
  assert.deepEqual(parseMemoryFlags({}), {});
  assert.throws(() => parseMemoryFlags({ 'gpu-memory-utilization': '0' }), /--gpu-memory-utilization 0: expected a fraction in \(0, 1\]/);
  assert.throws(() => parseMemoryFlags({ 'gpu-memory-utilization': '' }), /--gpu-memory-utilization '': expected/);
  assert.throws(() => parseMemoryFlags({ 'max-model-len': '1.5' }), /--max-model-len '1.5': expected an integer >= 2/);
  const spec = { maxPositions: 40960 } as ModelSpec;
  assert.equal(withMaxModelLen(spec, 8192).maxPositions, 8192);
  assert.equal(withMaxModelLen(spec, undefined), spec);
  assert.throws(() => withMaxModelLen(spec, 50000), /--max-model-len 50000 is over the model's max_position_embeddings \(40960\)/);
});

it('--host-experts: a thread count or auto, with an optional share; bad values and a share alone refused by name', () => {
  assert.deepEqual(parseMemoryFlags({ 'host-experts': 'auto' }).hostExperts, {});
  assert.deepEqual(parseMemoryFlags({ 'host-experts': '14', 'host-expert-share': '0.6' }).hostExperts, { threads: 14, share: 0.6 });
  assert.equal(parseMemoryFlags({}).hostExperts, undefined);
  assert.throws(() => parseMemoryFlags({ 'host-experts': '0' }), /--host-experts '0': expected a thread count in 1..1024 or 'auto'/);
  assert.throws(() => parseMemoryFlags({ 'host-experts': 'many' }), /--host-experts 'many'/);
  assert.throws(() => parseMemoryFlags({ 'host-experts': 'auto', 'host-expert-share': '1.2' }), /--host-expert-share '1.2': expected a fraction in \(0, 1\]/);
  assert.throws(() => parseMemoryFlags({ 'host-expert-share': '0.5' }), /--host-expert-share needs --host-experts/);
  assert.deepEqual(parseMemoryFlags({ 'host-experts': 'auto', 'host-expert-parts': '1' }).hostExperts, { parts: 1 });
  assert.throws(() => parseMemoryFlags({ 'host-experts': 'auto', 'host-expert-parts': '3.5' }), /--host-expert-parts '3.5': expected an integer in 1\.\.4/);
  assert.throws(() => parseMemoryFlags({ 'host-experts': 'auto', 'host-expert-parts': '8' }), /--host-expert-parts '8': expected an integer in 1\.\.4/);
  assert.throws(() => parseMemoryFlags({ 'host-expert-parts': '2' }), /--host-expert-parts needs --host-experts/);
});
