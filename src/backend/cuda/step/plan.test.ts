import { describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_BUCKETS, attendSplits, bucketFor, combineRowsPerWarp, gemvRowsPerWarp, oneWaveFeatureBlocks, planPieces } from './plan.ts';
import { GEMM_PROBLEM_BYTES, encodeGemm, gemvSmemBytes, gemvStagesWhole, maxGroupedTiles, stepLayout } from './kernel-args.ts';

describe('step planning', () => {
  it('a prefill chunk is one piece; pieces split at maxRows in order, outputs only at chunk ends', () => {
    const p = planPieces([{ seq: 1, tokens: [1, 2, 3, 4, 5], startPos: 0 }, { seq: 2, tokens: [9], startPos: 7 }], 4, 16);
    assert.equal(p.length, 2);
    assert.deepEqual(p[0]!.rows.map((r) => [r.seq, r.pos]), [[1, 0], [1, 1], [1, 2], [1, 3]]);
    assert.deepEqual(p[0]!.outs, []);
    assert.deepEqual(p[1]!.rows.map((r) => [r.seq, r.pos, r.tokenIndex]), [[1, 4, 4], [2, 7, 5]]);
    assert.deepEqual(p[1]!.outs, [{ row: 0, chunk: 0 }, { row: 1, chunk: 1 }]);
  });
  it('at most maxOut outputs a piece (the LM head gathers <= 16 rows)', () => {
    const chunks = Array.from({ length: 20 }, (_, i) => ({ seq: i, tokens: [i], startPos: 0 }));
    const p = planPieces(chunks, 2048, 16);
    assert.deepEqual(p.map((x) => x.outs.length), [16, 4]);
  });
  it('decode rows split their positions past 256, by powers of two; prefill pieces never', () => {
    assert.equal(attendSplits(1, 64, 32), 1 * 4); // few blocks: 65 positions in 4 splits of >= 16
    assert.equal(attendSplits(1, 255, 32), 16); // 256 positions, one kv head: 16 splits of 16
    assert.equal(attendSplits(1, 255, 32, 4), 8); // 4 kv heads: 32 blocks at 8 splits
    assert.equal(attendSplits(16, 255, 32, 4), 1);
    assert.equal(attendSplits(16, 256, 32, 4), 2);
    assert.equal(attendSplits(4, 2047, 32, 4), 8);
    assert.equal(attendSplits(16, 100000, 32), 32);
    assert.equal(attendSplits(17, 4000, 32), 1);
    assert.equal(attendSplits(1, 10, 32), 1); // too few positions to split
    assert.equal(attendSplits(1, 64, 32, 4, 0), 1); // minBlocks 0: split only past ATTEND_CHUNK positions
    assert.equal(attendSplits(1, 300, 32, 4, 0), 2);
    assert.equal(attendSplits(1, 64, 32, 4, 8), 2);
  });
  it('gemv shapes: two features a warp only when the grid stays two blocks an SM; shared memory within 64 KiB', () => {
    assert.equal(gemvRowsPerWarp(5120, 1, 132), 2);
    assert.equal(gemvRowsPerWarp(2048, 1, 132), 1);
    for (const B of [1, 2, 4, 8, 16]) for (const K of [768, 2048, 4096, 7168]) assert.ok(gemvSmemBytes(B, K) <= 64 * 1024);
    assert.equal(maxGroupedTiles(2048 * 8, 128), 256 + 128);
    // The combining down product: the fewest features a warp that keep its blocks to one wave of 4 a SM.
    assert.equal(combineRowsPerWarp(2048, 132), 4); // 512 blocks, not 1,024 (two waves)
    assert.equal(combineRowsPerWarp(512, 132), 1);
    assert.equal(combineRowsPerWarp(1024, 132), 2);
    assert.equal(combineRowsPerWarp(7168, 132), 4); // past one wave even at 4: the most there is
    // Gate/up in one wave: 768 units of 8 experts over 66 x 8 blocks (528, 4 a SM), 1-2 units a warp.
    assert.equal(oneWaveFeatureBlocks(768, 8, 2, 132), 66);
    assert.equal(oneWaveFeatureBlocks(768, 64, 2, 132), 48); // a wave would give a warp more than R: the fewest that do not
    assert.equal(oneWaveFeatureBlocks(32, 2, 1, 132), 4); // no more blocks than a feature a warp
  });
  it('layouts: GemmProblem fields at the C offsets (product.cuh), step rows 8-aligned and compact', () => {
    const b = Buffer.from(encodeGemm({ x: 1n, y: 2n, pickW: 21n, tileRow0: 14n, rowBytes: 99, wOff: 7, ldx: 3, ldy: 4, O: 5, K: 6, rows: 8, xDiv: 9, hotRows: 10, normW: 11n, normOut: 12n, eps: 0.5, scales: 13n, sOff: 15, sRows: 128, sCols: 64, sLd: 16, bias: 17n, bOff: 18, limit: 7, alpha: 1.5, guInterleave: true, early: true, l2: 1, part: 19n }));
    assert.equal(b.byteLength, GEMM_PROBLEM_BYTES);
    assert.equal(b.byteLength, 264);
    assert.equal(b.readBigUInt64LE(8 * 13), 14n);
    assert.equal(b.readBigUInt64LE(64), 21n); // pick_w
    assert.equal(b.readBigInt64LE(112), 99n);
    assert.equal(b.readBigInt64LE(120), 7n);
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6].map((i) => b.readInt32LE(128 + 4 * i)), [3, 4, 5, 6, 8, 9, 10]);
    assert.equal(b.readBigUInt64LE(160), 11n);
    assert.equal(b.readBigUInt64LE(168), 12n);
    assert.equal(b.readFloatLE(176), 0.5);
    assert.equal(b.readBigUInt64LE(184), 13n);
    assert.equal(b.readBigInt64LE(192), 15n);
    assert.deepEqual([0, 1, 2].map((i) => b.readInt32LE(200 + 4 * i)), [128, 64, 16]);
    assert.equal(b.readBigUInt64LE(216), 17n);
    assert.equal(b.readBigInt64LE(224), 18n);
    assert.deepEqual([b.readFloatLE(232), b.readFloatLE(236), b.readInt32LE(240)], [7, 1.5, 1]);
    assert.equal(b.readInt32LE(248), 1);
    assert.equal(b.readInt32LE(252), 1);
    assert.equal(b.readBigUInt64LE(256), 19n); // part
    // No bias given: b_off -1 (none), a bank row's bias is never at byte 0.
    assert.equal(Buffer.from(encodeGemm({ x: 1n, y: 2n, ldx: 1, ldy: 1, O: 1, K: 32 })).readBigInt64LE(224), -1n);
    for (const T of [1, 2, 4, 16, 2048]) {
      const o = stepLayout(T, 512);
      assert.equal(o.table % 8, 0);
      assert.ok(o.out + 64 <= o.table && o.tables === o.table + 8 * T);
      // A table a sequence (a piece holds at most 17) and the padding rows' scratch one, 512 blocks each.
      assert.equal(o.tableSlots, Math.min(T, 17) + 1);
      assert.equal(o.bytes, o.tables + 4 * 512 * o.tableSlots);
    }
    assert.ok(stepLayout(1, 4).bytes < 160);
    assert.ok(gemvStagesWhole(1, 7168) && gemvStagesWhole(8, 2048) && !gemvStagesWhole(16, 2048));
  });
});

describe('workspace', () => {
  it('counts the weights as stored, a KV block in its dtype and the work buffers of a piece', async () => {
    const { memoryNeeds, workspaceLayout } = await import('../memory/workspace.ts');
    const { parseConfig } = await import('../../../model/config.ts');
    const { syntheticConfig } = await import('../../../model/synthetic.ts');
    const { headerSource } = await import('../weights/header-source.ts');
    const { deviceWeightBytes } = await import('../weights/device-weights.ts');
    const spec = parseConfig(syntheticConfig({ vocab_size: 8192, hidden_size: 2048, num_hidden_layers: 16, num_attention_heads: 32, num_key_value_heads: 4, head_dim: 128,
      moe_intermediate_size: 768, num_experts: 128, num_experts_per_tok: 8, tie_word_embeddings: false }), 'q30');
    const n = memoryNeeds(spec, 128, 2048, 32, deviceWeightBytes(headerSource(spec), spec), { blockSize: 16, dtype: 'bfloat16', maxBlocks: 256 });
    // Qwen3-30B-A3B geometry, 16 layers, every expert hot: the checkpoint's 20.0 GB less nothing of note.
    assert.ok(Math.abs(n.weights - 20.01e9) < 0.02e9, `weights ${n.weights}`);
    // 16 layers x 16 positions x k and v of 4 heads of 128, 2 bytes each: half of float32's, and FP8 a quarter.
    assert.equal(n.bytesPerBlock, 16 * 16 * 2 * 512 * 2);
    assert.equal(memoryNeeds(spec, 128, 2048, 32, deviceWeightBytes(headerSource(spec), spec), { blockSize: 16, dtype: 'float32', maxBlocks: 256 }).bytesPerBlock, 2 * n.bytesPerBlock);
    assert.equal(memoryNeeds(spec, 128, 2048, 32, deviceWeightBytes(headerSource(spec), spec), { blockSize: 16, dtype: 'fp8', maxBlocks: 256 }).bytesPerBlock, n.bytesPerBlock / 2);
    assert.ok(n.workspace > 0.25e9 && n.workspace < 0.4e9, `workspace ${n.workspace}`);
    assert.equal(new Set(workspaceLayout(spec, 16, 32).map(([k]) => k)).size, workspaceLayout(spec, 16, 32).length);
  });
});

test('bucketFor picks the smallest captured bucket', () => {
  assert.deepEqual([1, 2, 3, 5, 9, 16].map((n) => bucketFor(n, DEFAULT_BUCKETS)), [1, 2, 4, 8, 16, 16]);
  assert.throws(() => bucketFor(17, DEFAULT_BUCKETS), /no graph bucket/);
});
