// The disposer stack on its own (no driver): reverse order, a failed acquisition releases what came
// before it, a failing release does not stop the others, close() is idempotent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResidencyError } from '../../../errors.ts';
import { ResourceScope, type ReleaseFailure } from './resource-scope.ts';

function recorder(): { log: string[]; failures: ReleaseFailure[]; scope: ResourceScope } {
  const failures: ReleaseFailure[] = [];
  return { log: [], failures, scope: new ResourceScope('test scope', (f) => failures.push(f)) };
}

test('close() releases last acquired first, once', () => {
  const { log, failures, scope } = recorder();
  for (const name of ['a', 'b', 'c']) scope.adopt(name, name, (r) => log.push(`free ${r}`));
  scope.defer('sync', () => log.push('sync'));
  assert.equal(scope.size, 4);
  assert.deepEqual(scope.close(), []);
  assert.deepEqual(log, ['sync', 'free c', 'free b', 'free a']);
  assert.equal(scope.size, 0);
  assert.ok(scope.closed);
  assert.deepEqual(scope.close(), [], 'a second close releases nothing');
  assert.equal(log.length, 4);
  assert.deepEqual(failures, []);
});

test('a failure in the middle of acquiring releases exactly what was acquired, then the original error surfaces', () => {
  const { log, failures, scope } = recorder();
  const boom = new ResidencyError('CUDA_ERROR', 'CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc(1.0 GiB)');
  let n = 0;
  const acquire = (): number => {
    if (++n === 3) throw boom;
    return n;
  };
  const build = (): void => {
    try {
      for (let i = 0; i < 5; i++) scope.acquire(`buffer ${i}`, acquire, (r) => log.push(`free ${r}`));
    } catch (e) {
      throw scope.unwind(e);
    }
  };
  assert.throws(build, (e: unknown) => e === boom);
  assert.deepEqual(log, ['free 2', 'free 1'], 'the failed third acquisition recorded nothing');
  assert.equal(scope.size, 0);
  assert.deepEqual(failures, []);
});

test('a release that throws is reported and the others still run; the original construction error still wins', () => {
  const { log, failures, scope } = recorder();
  const bad = new Error('CUDA_ERROR_INVALID_HANDLE in cuMemFree_v2()');
  scope.adopt(1, 'first', () => log.push('free 1'));
  scope.adopt(2, 'second', () => { throw bad; });
  scope.adopt(3, 'third', () => log.push('free 3'));
  const original = new Error('half way');
  assert.equal(scope.unwind(original), original);
  assert.deepEqual(log, ['free 3', 'free 1']);
  assert.equal(failures.length, 1);
  assert.deepEqual(failures[0], { scope: 'test scope', what: 'second', error: bad });
});

test('close() returns every failure, a throwing sink stops nothing, and close() never throws', () => {
  const log: string[] = [];
  const scope = new ResourceScope('noisy', () => { throw new Error('sink broke'); });
  scope.adopt(1, 'a', () => { throw new Error('a failed'); });
  scope.adopt(2, 'b', () => log.push('b'));
  scope.adopt(3, 'c', () => { throw new Error('c failed'); });
  const failures = scope.close();
  assert.deepEqual(failures.map((f) => f.what), ['c', 'a']);
  assert.deepEqual(log, ['b']);
});

test('releaseEarly releases one resource now and forgets it; adopting after close releases at once and throws', () => {
  const { log, scope } = recorder();
  const kvA = { kv: 'A' };
  const kvB = { kv: 'B' };
  scope.adopt(kvA, 'kv A', (r) => log.push(`free ${r.kv}`));
  scope.adopt(kvB, 'kv B', (r) => log.push(`free ${r.kv}`));
  scope.releaseEarly(kvA);
  assert.deepEqual(log, ['free A']);
  assert.equal(scope.size, 1);
  assert.throws(() => scope.releaseEarly(kvA), (e: unknown) => e instanceof ResidencyError && e.code === 'INTERNAL');
  scope.close();
  assert.deepEqual(log, ['free A', 'free B']);
  assert.throws(() => scope.adopt('late', 'late graph', (r) => log.push(`free ${r}`)), /late graph acquired after dispose/);
  assert.deepEqual(log, ['free A', 'free B', 'free late'], 'nothing is left without an owner');
});
