// The router job (OP_ROUTE: a step's tokens split between threads, each computing its tokens' logits and routing
// them): bit-identical to the serial compute's router (logits, probabilities, picks and weights, byte for byte) for
// token counts below and above the split, with the JS loops and the SIMD kernel, the workers taking part.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuThreadPool } from './pool.ts';
import { serialCompute, type RowCompute, type SimdCompute } from '../row-compute.ts';
import { sharedAlloc, type Alloc } from '../alloc.ts';
import { WasmArena } from '../wasm/arena.ts';
import { simdKernel } from '../wasm/kernel.ts';
import { TabStage } from '../wasm/stage.ts';
import { expertScratch } from '../wasm/experts.ts';
import { mulberry32 } from '../synthetic.ts';
import { bytesOf as bytes } from '../test-helpers.ts';

function simdOf(arena: WasmArena, threads: number): SimdCompute {
  const per = <T>(f: () => T): T[] => Array.from({ length: threads }, f);
  return { arena, kernel: simdKernel(arena.memory), stage: new TabStage(arena), experts: per(() => expertScratch(arena, 8)), scores: per(() => arena.f64(64)), accs: per(() => arena.f64(16)) };
}

/** The router's outputs on `compute` for random x and W (the same seed on every compute). */
function routeOn(compute: RowCompute, alloc: Alloc, tokens: number, E: number, H: number, K: number, normalize: boolean): Buffer {
  const rand = mulberry32(tokens * 31 + E);
  const w = alloc.f32(E * H);
  const x = alloc.f32(tokens * H);
  for (const a of [w, x]) for (let i = 0; i < a.length; i++) a[i] = (rand() * 2 - 1) * (rand() < 0.02 ? 0 : 1);
  // Ties: two experts with the same weights.
  w.copyWithin(3 * H, 0, H);
  const logits = alloc.f32(tokens * E);
  const probs = alloc.f32(tokens * E);
  const ids = alloc.i32(tokens * K);
  const weights = alloc.f32(tokens * K);
  compute.route(logits, probs, ids, weights, w, x, tokens, E, H, K, normalize);
  return Buffer.concat([bytes(logits), bytes(probs), bytes(ids), bytes(weights)]);
}

for (const simd of [false, true]) {
  test(`the router split by tokens is bit-identical to the serial router (${simd ? 'SIMD kernel' : 'JS loops'})`, async () => {
    const arena = simd ? new WasmArena() : null;
    const alloc: Alloc = arena ?? sharedAlloc;
    const serial = serialCompute([], 8, arena ? simdOf(arena, 1) : undefined);
    const pool = new CpuThreadPool({ threads: 2, banks: [], ...(arena ? { simd: simdOf(arena, 2) } : {}) });
    try {
      await pool.ready();
      const before = pool.workerChunks();
      // Rounds until the worker has taken chunks (a sleeping worker leaves a job's chunks to the main thread).
      for (let round = 0; round < 3 || (pool.workerChunks() === before && round < 200); round++) {
        for (const [tokens, E, H, K, normalize] of [[1, 64, 128, 6, true], [3, 8, 5, 2, false], [4, 64, 128, 6, true], [5, 7, 9, 3, true], [17, 16, 33, 4, false], [128, 64, 128, 6, true]] as const) {
          const want = routeOn(serial, alloc, tokens, E, H, K, normalize);
          const got = routeOn(pool, alloc, tokens, E, H, K, normalize);
          assert.ok(got.equals(want), `tokens ${tokens} experts ${E} hidden ${H} top-${K}`);
        }
      }
      assert.ok(pool.workerChunks() > before, 'the worker took part');
    } finally {
      pool.dispose();
    }
  });
}
