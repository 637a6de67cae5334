// The cuda backend's choice of attn_route grid per sub-step, on the fake driver (no GPU): steps whose rows
// all read <= 256 positions launch (and capture) the one-block grid, a step with a row past 256 the split
// grid; graphs are keyed by bucket, path and grid, so each replays only for the steps its grid covers.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectedTensors } from '../../model/architecture.ts';
import type { RawTensor } from '../../model/weights.ts';
import { syntheticModel } from '../cpu/synthetic.ts';
import { CudaBackend, type CudaBackendOptions } from './cuda-backend.ts';
import { FakeCudaDriver } from './fake-driver.ts';
import { KERNEL_GROUPS } from './kernels.ts';
import { ATTN_SPLIT_MIN } from './plan.ts';

const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-attn-grid-'));
for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
after(() => rmSync(kernelDir, { recursive: true, force: true }));

// Room past the split threshold: 512 positions (the fake device has 4 SMs: max splits 4 at buckets 1 and 2).
const { spec } = syntheticModel({ hiddenSize: 32, headDim: 8, numHeads: 4, numKvHeads: 2, expertIntermediate: 16, numExperts: 8, topK: 2, maxPositions: 512 });
const raw = new Map<string, RawTensor>();
for (const [name, shape] of expectedTensors(spec)) raw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });

function build(opts: CudaBackendOptions): { d: FakeCudaDriver; b: CudaBackend } {
  const d = new FakeCudaDriver();
  return { d, b: new CudaBackend(d, spec, raw, { kernelDir, placement: { hotPerLayer: 5 }, ...opts }) };
}

/** attn_route grids launched since `from` (eager launches, or recorded into a graph being captured). */
const attnGrids = (d: FakeCudaDriver, from: number): string[] =>
  d.launches.slice(from).filter((l) => l.name.startsWith('attn_route')).map((l) => {
    // The short grid launches attn_route (no split path compiled in), the long one attn_route_split.
    assert.equal(l.name, l.grid[1] > 1 ? 'attn_route_split' : 'attn_route', `grid ${l.grid.join('x')} launched as ${l.name}`);
    return l.grid.join('x');
  });

/**
 * Two sequences: seq 1 prefilled to position 250, seq 2 to 4; then decode steps of both rows until seq 1
 * is at position 258. Calls `step(pos1)` after each decode step with seq 1's position in it.
 */
function decodeAcross(b: CudaBackend, step: (pos1: number) => void): void {
  b.openSequence(1, 300);
  b.openSequence(2, 300);
  b.forward({ chunks: [{ seq: 1, tokens: Array.from({ length: 250 }, (_, i) => i % 7), startPos: 0 }, { seq: 2, tokens: [1, 2, 3, 4], startPos: 0 }], count: false });
  for (let p1 = 250, p2 = 4; p1 <= 258; p1++, p2++) {
    b.forward({ chunks: [{ seq: 1, tokens: [1], startPos: p1 }, { seq: 2, tokens: [2], startPos: p2 }], count: true, argmaxOnly: true });
    step(p1);
  }
}

test('graphs: the short graph (rows x 1) up to 256 positions read, the long graph (rows x max splits) once a row crosses, each captured once', () => {
  const { d, b } = build({});
  const L = spec.numLayers;
  assert.equal(b.attnSplits(2), 4);
  let seen = 0;
  const capturedAt = new Map<string, number>();
  decodeAcross(b, (p1) => {
    for (const k of b.graphKeys()) if (!capturedAt.has(k)) capturedAt.set(k, p1);
    const keys = b.graphKeys();
    if (p1 + 1 <= ATTN_SPLIT_MIN) assert.ok(!keys.includes('2/layered/long'), `pos ${p1}: no long graph yet`);
    else assert.ok(keys.includes('2/layered/long'), `pos ${p1}: long graph captured`);
    const grids = attnGrids(d, seen);
    seen = d.launches.length;
    // Only a capture records launches here (graph replays launch none); the crossing step captures the long graph.
    if (p1 === ATTN_SPLIT_MIN) assert.deepEqual(grids, Array(L).fill('2x4x1'), 'the long graph is captured with the split grid');
    else if (p1 > 250) assert.deepEqual(grids, [], `pos ${p1}: a replay, nothing captured`); // (pos 250: the prefill's captures too)
    else assert.deepEqual(grids, [...Array(L).fill('2x1x1'), ...Array(L).fill('1x1x1')], 'prefill: the 2-row and 1-row short graphs, one block per row');
  });
  // Prefill: 4 sub-steps of 2 rows, 246 of 1 row (all short); decode: the 2-row short graph until pos 255.
  assert.deepEqual([...capturedAt.keys()].sort(), ['1/layered/short', '2/layered/long', '2/layered/short']);
  assert.equal(capturedAt.get('2/layered/long'), ATTN_SPLIT_MIN, 'the long graph first used at pos 256 (257 positions read)');
  b.dispose();
});

test('graph capture grids: short graphs one block per row, the long graph the bucket\'s max splits', () => {
  const { d, b } = build({});
  b.openSequence(1, 300);
  const at = (pos: number): string[] => {
    const from = d.launches.length;
    b.forward({ chunks: [{ seq: 1, tokens: [1], startPos: pos }], count: false, argmaxOnly: true });
    return attnGrids(d, from);
  };
  const L = spec.numLayers;
  assert.deepEqual(at(0), Array(L).fill('1x1x1'), 'first short step captures the one-block graph');
  assert.deepEqual(at(ATTN_SPLIT_MIN - 1), [], 'pos 255 replays it');
  assert.deepEqual(at(ATTN_SPLIT_MIN), Array(L).fill('1x4x1'), 'pos 256 captures the split graph');
  assert.deepEqual(at(5), [], 'a later short step replays the short graph again (no recapture)');
  assert.deepEqual(b.graphKeys().sort(), ['1/layered/long', '1/layered/short']);
  b.dispose();
});

test('eager launches pick the grid per step the same way', () => {
  const { d, b } = build({ graphs: false });
  const L = spec.numLayers;
  decodeAcross(b, (p1) => {
    const grids = attnGrids(d, d.launches.length - (2 * L + 1)); // one step: L x (attn_route, expert_ffn) + lm_head
    assert.deepEqual(grids, Array(L).fill(p1 + 1 > ATTN_SPLIT_MIN ? '2x4x1' : '2x1x1'), `pos ${p1}`);
  });
  assert.deepEqual(b.graphKeys(), []);
  b.dispose();
});

test('fused backend: short steps on the fused graph, a step past 256 positions on the long layered graph; split off stays short', () => {
  const { b } = build({ fused: true });
  decodeAcross(b, () => {});
  assert.deepEqual(b.graphKeys().sort(), ['1/fused/short', '2/fused/short', '2/layered/long']);
  b.dispose();
  const { d: d2, b: off } = build({ attnSplits: 1 });
  decodeAcross(off, () => {});
  assert.deepEqual(off.graphKeys().sort(), ['1/layered/short', '2/layered/short'], 'split off: never a long graph');
  assert.ok(d2.launches.filter((l) => l.name.startsWith('attn_route')).every((l) => l.name === 'attn_route' && l.grid[1] === 1));
  off.dispose();
});
