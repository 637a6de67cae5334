import { test } from 'node:test';
import assert from 'node:assert/strict';
import { drainLine, StepRing, swapLine } from './telemetry.ts';

test('the step ring keeps the last `capacity` steps, oldest first', () => {
  const ring = new StepRing(4);
  for (let s = 0; s < 10; s++) ring.push(s, 1000 + s, 1, s % 3 === 0 ? 2 : 0, s % 3 === 0 ? 500 : 0);
  const d = ring.dump();
  assert.equal(d.recorded, 10);
  assert.deepEqual(d.step, [6, 7, 8, 9]);
  assert.deepEqual(d.t_ns, [1006, 1007, 1008, 1009]);
  assert.deepEqual(d.swaps, [2, 0, 0, 2]);
  assert.deepEqual(new StepRing(4).dump().step, []);
});

test('telemetry lines are plain versioned JSON', () => {
  const t = new Date(0);
  const line = drainLine({
    step: 63, steps: 64, tokens: 64, countedSteps: 64, countedTokens: 64, picks: 100, coldPicks: 3, coldShare: 0.03, coldShareByLayer: [0.02, 0.04],
    decided: [], applied: 1, refused: 2, superseded: 4, queueDepth: 0, frozen: false,
  }, t);
  assert.deepEqual(JSON.parse(JSON.stringify(line)), {
    v: 1, time: '1970-01-01T00:00:00.000Z', step: 63, window_steps: 64, tokens: 64, counted_tokens: 64, picks: 100, cold_share: 0.03,
    cold_share_by_layer: [0.02, 0.04], decided: 0, swaps_applied: 1, swaps_refused: 2, swaps_superseded: 4, queue_depth: 0, frozen: false,
  });
  const s = swapLine({ layer: 1, hotExpert: 2, hotRow: 3, coldExpert: 4, coldRow: 5, decidedAtStep: 6, reason: 'adapt' }, 7, 800, t);
  assert.equal(s.hot_expert, 2);
  assert.equal(s.apply_ns, 800);
});
