// Banks held in pieces (banks.ts: a layer's bank at real size is past a typed array's 2^32 elements): with the
// piece size forced down to one row, or to three rows (a bank's last piece shorter), every step's logits and
// routing through random swaps, the counter and the digest are the bytes of one piece per bank; float32,
// bf16-as-stored, block-FP8 and MXFP4 rows, a family with a dense layer; one and two threads, SIMD on and off.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCpuBackend } from './cpu-backend.ts';
import { CpuExpertBanks } from './banks.ts';
import { assertSameRecord, randomMap, recordRun } from './test-helpers.ts';
import { loadModel } from '../../model/load.ts';
import { moeLayerCount } from '../../model/spec.ts';
import { ResidencyError } from '../../errors.ts';
import { familyCheckpoint } from '../../../fixtures/fixture-paths.ts';

const TINY = resolve(fileURLToPath(new URL('../../../models/tiny-moe', import.meta.url)));
const sched = { swapsPerStep: 3, seed: 5, token: (f: number, i: number, s: number) => f * 7 + i * 13 + s, counted: (i: number) => i % 3 !== 1 };
const batches = [[[1, 5, 9, 2]], [[3, 4], [7, 8, 10, 11, 12], [6]]];

type Case = readonly [name: string, load: () => ReturnType<typeof loadModel>, hot: number, configs: readonly (readonly [threads: number, simd: boolean])[]];
const ALL = [[1, false], [1, true], [2, false], [2, true]] as const;
const cases: readonly Case[] = [
  ['tiny-moe float32', () => loadModel(TINY, { raw: false, bf16: 'float32' }), 40, ALL],
  ['tiny-moe bf16 as stored', () => loadModel(TINY, { raw: false, bf16: 'stored' }), 40, ALL],
  ['qwen3-moe-fp8-tiny (block FP8 rows)', () => loadModel(familyCheckpoint('qwen3-moe-fp8-tiny'), { raw: false }), 5, [[1, false], [2, true]]],
  ['gpt-oss-tiny-mxfp4 (MXFP4 rows with biases)', () => loadModel(familyCheckpoint('gpt-oss-tiny-mxfp4'), { raw: false }), 7, [[1, false], [2, true]]],
  ['deepseek-v3-tiny (dense layer 0)', () => loadModel(familyCheckpoint('deepseek-v3-tiny'), { raw: false }), 13, [[1, true], [2, false]]],
];

describe('bank pieces', () => {
  for (const [name, load, hot, configs] of cases) {
    for (const [threads, simd] of configs) {
      it(`${name}, ${threads} thread(s), SIMD ${simd ? 'on' : 'off'}: one-row and three-row pieces give one piece's bytes`, async () => {
        const m = await load();
        const placement = randomMap(m.spec, hot, 11);
        const whole = createCpuBackend(m.spec, m.weights, { placement, threads, simd });
        const row = whole.banks.rowSize;
        const cold = m.spec.numExperts - hot;
        assert.equal(whole.banks.pieces.length, 2 * moeLayerCount(m.spec), 'one piece a bank by default');
        try {
          const boot = whole.banks.digest();
          await whole.ready();
          const want = recordRun(whole, batches, 6, sched);
          for (const [rows, pieceWords] of [[1, 1], [3, 3 * row + 1]] as const) {
            const b = createCpuBackend(m.spec, m.weights, { placement, threads, simd, bankPieceWords: pieceWords });
            try {
              assert.equal(b.banks.rowsPerPiece, rows);
              assert.equal(b.banks.pieces.length, moeLayerCount(m.spec) * (Math.ceil(hot / rows) + Math.ceil(cold / rows)), 'pieces');
              assert.ok(b.banks.pieces.every((p) => p.length <= Math.max(pieceWords, row)), 'each piece within its size');
              assert.equal(b.banks.bytes, whole.banks.bytes, 'bytes held');
              assert.equal(b.banks.digest(), boot, 'boot digest');
              await b.ready();
              assertSameRecord(recordRun(b, batches, 6, sched), want, `${rows}-row pieces`);
              if (threads > 1) {
                // Whether the worker wakes in time for a chunk of a short run is up to the scheduler (2 cores in CI):
                // run again until it has taken one, as the pool tests do.
                for (let i = 0; i < 20 && b.workerChunks() === 0; i++) recordRun(b, batches, 6, sched);
                assert.ok(b.workerChunks() > 0, 'a worker computed from the pieces');
              }
            } finally {
              b.dispose();
            }
          }
        } finally {
          whole.dispose();
        }
      });
    }
  }

  it('a row view and a swap across pieces: the bytes move between pieces, the slots follow', async () => {
    const m = await loadModel(TINY, { raw: false, bf16: 'float32' });
    const banks = new CpuExpertBanks(m.spec, m.weights.layers, { hotPerLayer: 10 }, { pieceWords: 2 * 3 * 48 * 128 });
    assert.equal(banks.rowsPerPiece, 2);
    const [e1, e2] = [banks.expertAt(1, 'hot', 3), banks.expertAt(1, 'cold', 2)];
    assert.deepEqual([e1, e2], [3, 12]);
    assert.deepEqual(banks.row(1, 'hot', 3).subarray(0, 48 * 128), m.weights.layers[1]!.experts[3]!.gate);
    banks.swapRows(1, 3, 2);
    assert.deepEqual([banks.slotOf(1, 3), banks.slotOf(1, 12)], [12, 3]);
    assert.deepEqual(banks.row(1, 'hot', 3).subarray(0, 48 * 128), m.weights.layers[1]!.experts[12]!.gate);
    assert.deepEqual(banks.row(1, 'cold', 2).subarray(2 * 48 * 128), m.weights.layers[1]!.experts[3]!.down);
    assert.throws(() => banks.row(1, 'cold', 54), ResidencyError);
    assert.throws(() => new CpuExpertBanks(m.spec, m.weights.layers, undefined, { pieceWords: 0 }), /pieceWords 0/);
    assert.throws(() => new CpuExpertBanks(m.spec, m.weights.layers, undefined, { pieceWords: 2 ** 31 }), /pieceWords/);
  });
});
