// The schedule of background exchanges on its own: two copies a move, copy slots over all layers, spare rows per
// layer, landing only when a copy reports done, rows in flight refused, the freed hot row the layer's next spare.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MovePipeline, type MoveSteps, type PipelineMove } from './move-pipeline.ts';

type M = PipelineMove & { done: boolean };

function recorder() {
  const log: string[] = [];
  const steps: MoveSteps<M> = {
    copyDone: (m) => m.done,
    copyIn: (m) => { m.done = false; log.push(`in ${m.layer}/${m.enter}->${m.spare}`); },
    landIn: (m) => { log.push(`landIn ${m.layer}/${m.enter}`); },
    copyOut: (m) => { m.done = false; log.push(`out ${m.layer}/${m.leave}`); },
    landOut: (m) => { log.push(`landOut ${m.layer}/${m.leave}`); return 100 + m.hotRow; },
    landed: (layers) => { log.push(`tables ${[...layers].join(',')}`); },
  };
  return { log, steps };
}

const move = (layer: number, hotRow: number, coldRow: number): M =>
  ({ layer, hotRow, coldRow, leave: 10 + hotRow, enter: 20 + coldRow, spare: -1, phase: 0, done: false });

test('a move is two copies, landing in order, the tables told before the second copy is queued', () => {
  const p = new MovePipeline<M>([[7], [7]], 2);
  const { log, steps } = recorder();
  const m = move(0, 1, 2);
  p.request(m);
  assert.deepEqual(p.advance(steps), []);
  assert.deepEqual(log, ['in 0/22->7']);
  assert.deepEqual(p.advance(steps), [], 'copy not done: nothing moves');
  m.done = true;
  assert.deepEqual(p.advance(steps), []);
  assert.deepEqual(log.slice(1), ['landIn 0/22', 'tables 0', 'out 0/11']);
  m.done = true;
  assert.deepEqual(p.advance(steps), [{ layer: 0, hotRow: 1, coldRow: 2 }]);
  assert.equal(p.moving, 0);
  // The hot row the leaving expert freed is the layer's spare now.
  p.request(move(0, 3, 0));
  p.advance(steps);
  assert.equal(log.at(-1), 'in 0/20->101');
  assert.throws(() => p.request(move(0, 3, 5)), /layer 0 hot row 3 or cold row 5 is already moving/);
});

test('copy slots are shared by all layers; a layer waits for its spare rows; startable counts what would start now', () => {
  const p = new MovePipeline<M>([[7], [7, 8]], 2);
  const { steps } = recorder();
  assert.equal(p.startable, 2);
  const a = move(0, 0, 0), b = move(0, 1, 1), c = move(1, 0, 0);
  for (const m of [a, b, c]) p.request(m);
  p.advance(steps);
  assert.deepEqual([a.phase, b.phase, c.phase], [1, 0, 1], 'b waits for layer 0\'s one spare row; c takes the second slot');
  assert.equal(p.startable, 0);
  a.done = true; c.done = true;
  p.advance(steps);
  assert.deepEqual([a.phase, b.phase, c.phase], [2, 0, 2], 'second copies keep their slots');
  a.done = true; c.done = true;
  assert.equal(p.advance(steps).length, 2);
  assert.equal(b.phase, 1, 'a\'s freed row lets b start');
  assert.equal(p.startable, 1);
  assert.throws(() => new MovePipeline<M>([[1]], 0), /copiesInFlight 0: expected an integer >= 1/);
});
