// Test-only: the harness of the token-split job suites (route, q/k/v): a serial compute and a 2-thread pool,
// with the JS loops or the SIMD kernel, compared byte for byte over cases until the worker has taken part.
import assert from 'node:assert/strict';
import { CpuThreadPool } from './pool.ts';
import { serialCompute, type RowCompute, type SimdCompute } from '../row-compute.ts';
import { sharedAlloc, type Alloc } from '../alloc.ts';
import { WasmArena } from '../wasm/arena.ts';
import { simdKernel } from '../wasm/kernel.ts';
import { TabStage } from '../wasm/stage.ts';
import { expertScratch } from '../wasm/experts.ts';

function simdOf(arena: WasmArena, threads: number): SimdCompute {
  const per = <T>(f: () => T): T[] => Array.from({ length: threads }, f);
  return { arena, kernel: simdKernel(arena.memory), stage: new TabStage(arena), experts: per(() => expertScratch(arena, 8)), scores: per(() => arena.f64(64)), accs: per(() => arena.f64(16)) };
}

/**
 * For each case, `run(compute, alloc, c)` on the serial compute and on the pool must give the same bytes
 * (`label(c)` names a mismatch); rounds repeat until the worker has taken chunks (a sleeping worker leaves a
 * job's chunks to the main thread), and it must have.
 */
export async function assertSplitMatchesSerial<C>(simd: boolean, cases: readonly C[], run: (compute: RowCompute, alloc: Alloc, c: C) => Buffer, label: (c: C) => string): Promise<void> {
  const arena = simd ? new WasmArena() : null;
  const alloc: Alloc = arena ?? sharedAlloc;
  const serial = serialCompute([], 8, arena ? simdOf(arena, 1) : undefined);
  const pool = new CpuThreadPool({ threads: 2, banks: [], ...(arena ? { simd: simdOf(arena, 2) } : {}) });
  try {
    await pool.ready();
    const before = pool.workerChunks();
    for (let round = 0; round < 3 || (pool.workerChunks() === before && round < 200); round++) {
      for (const c of cases) {
        const want = run(serial, alloc, c);
        assert.ok(run(pool, alloc, c).equals(want), label(c));
      }
    }
    assert.ok(pool.workerChunks() > before, 'the worker took part');
  } finally {
    pool.dispose();
  }
}
