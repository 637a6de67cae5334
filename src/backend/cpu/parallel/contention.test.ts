import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Contention } from './contention.ts';

test('the cores count as shared over a window of more than 300 involuntary switches a second, read once a window', () => {
  let now = 0;
  let switches = 0;
  const c = new Contention(() => now, () => switches);
  assert.equal(c.check(), false);
  now = 50;
  switches = 10; // 200 a second
  assert.equal(c.check(), false);
  now = 100;
  switches = 30; // 400 a second
  assert.equal(c.check(), true);
  now = 120;
  switches = 30; // within the window: the last answer
  assert.equal(c.check(), true);
  now = 200;
  assert.equal(c.check(), false); // none over the 100 ms since
});

test('the real counter and clock answer', () => {
  assert.equal(typeof new Contention().check(), 'boolean');
});
