// The whole-phase oracle: at every phase start its hot set is the top-H of that phase's own counts, it
// moves only at phase boundaries, and every layer always holds exactly H hot experts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { streamCounts } from '../fit.ts';
import type { SimStep } from '../traffic.ts';
import { oraclePolicy } from './oracle.ts';
import { runPolicyConformance } from './policy.case.test.ts';

test('oracle-phase: top-H of each phase, moved only at phase starts', () => {
  const g = { layers: 2, experts: 8, hotPerLayer: 3, topK: 2 };
  // Phase 0 picks experts 0-3, phase 1 experts 4-7 (skewed so top-3 is unique), 10 steps each.
  const steps: SimStep[] = [];
  for (let s = 0; s < 20; s++) {
    const phase = s < 10 ? 0 : 1;
    const b = phase * 4;
    const a = b + (s % 3 === 0 ? 2 : 0);
    const c = b + (s % 2 === 0 ? 1 : 3);
    steps.push({ index: s, phase, tokens: 1, counted: true, picks: Uint16Array.from([a, c, a, c]) });
  }
  const p = oraclePolicy('phase')({ geometry: g, bootMap: { version: 1, model: 't', layers: 2, experts: 8, hot_per_layer: 3, layers_map: [] }, steps });
  const topH = (from: number, to: number) => {
    const counts = streamCounts(steps, g, from, to);
    return [0, 1].map((l) => Array.from({ length: 8 }, (_, e) => e).sort((x, y) => counts[l * 8 + y]! - counts[l * 8 + x]! || x - y).slice(0, 3).sort());
  };
  const hotNow = () => [0, 1].map((l) => Array.from({ length: 8 }, (_, e) => e).filter((e) => p.hot[l * 8 + e]));
  assert.deepEqual(hotNow(), topH(0, 10));
  let moved = 0;
  for (const s of steps) {
    const m = p.afterStep(s);
    if (s.index !== 9) assert.equal(m.swaps, 0, `step ${s.index}`);
    moved += m.swaps;
    for (const h of hotNow()) assert.equal(h.length, 3);
    if (s.index === 9) assert.deepEqual(hotNow(), topH(10, 20));
  }
  assert.ok(moved > 0);
});

runPolicyConformance('oracle-phase', oraclePolicy('phase'), { startsAtBoot: false, moves: true });
