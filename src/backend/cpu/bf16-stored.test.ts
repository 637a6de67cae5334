// bf16 weights kept as stored on the CPU (RESIDENCY_CPU_BF16=stored, and by default past the SIMD kernel's
// reach): the attention projections, experts, embedding and lm head of the shipped model stay bf16 (half the
// bytes), read from the stored bits, and every output is byte for byte what the float32 conversion gives, with
// one and two threads and SIMD on and off (on: through the kernel's bf16 linear, the rows as stored in its
// memory), tied embeddings and untied.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bf16Policy, loadModel } from '../../model/load.ts';
import { bf16FromEnv, cpuBf16Placement } from './load-options.ts';
import { loadModelFor } from '../load-for.ts';
import { WasmArena } from './wasm/arena.ts';
import { resolveSimd } from './wasm/simd-option.ts';
import type { Bf16Matrix } from '../../model/quant.ts';
import { parseConfig } from '../../model/config.ts';
import { SHIPPED_MODEL, rejectsWith, withTempDir } from '../../model/test-helpers.ts';
import { syntheticConfig, writeSyntheticCheckpoint } from '../../model/synthetic.ts';
import { heldBytes } from '../../model/weight-bytes.ts';
import type { ModelWeights } from '../../model/weights.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { createCpuBackend, type CpuBackendOptions } from './cpu-backend.ts';
import { recordFresh } from './test-helpers.ts';
import { simdBf16Calls } from './wasm/kernel.ts';

// Steps of 2, 1 and 3 chunks: the lm head's products on one, two and more rows (quant-linear.ts linearQ).
const batches = [[[1, 2, 3, 400, 5000, 17, 99, 1024], [7, 7, 7, 300, 8000, 12]], [[42, 4242]], [[5, 6], [8100, 9, 10], [11]]];
const sched = { swapsPerStep: 2, seed: 5, token: (f: number, i: number, s: number) => f * 31 + i * 7 + s, counted: () => true };

/** Whether the last run's backend ran the SIMD kernel (off under RESIDENCY_CPU_SIMD=0 unless asked). */
let lastSimd = false;

async function run(spec: ModelSpec, weights: ModelWeights, opts: CpuBackendOptions, hot = 40): Promise<Buffer> {
  const r = await recordFresh(spec, weights, { ...opts, placement: { hotPerLayer: hot } }, batches.map((ps) => ps.map((p) => p.map((t) => t % spec.vocabSize))), 4, sched);
  lastSimd = r.simd;
  return Buffer.concat([...r.steps, r.counter]);
}

describe('bf16 kept as stored', () => {
  it('tiny-moe: projections, experts and the tied embedding stay bf16, outputs byte-identical to the float32 conversion (1 and 2 threads, SIMD on and off)', async () => {
    const [f32, stored] = await Promise.all([loadModel(SHIPPED_MODEL, { raw: false }), loadModel(SHIPPED_MODEL, { raw: false, bf16: 'stored' })]);
    const l = stored.weights.layers[3]!;
    for (const m of [l.qProj, l.kProj, l.vProj, l.oProj, l.experts[7]!.gate, l.experts[7]!.down, stored.weights.embed]) assert.equal((m as { format?: string }).format, 'bf16');
    assert.equal(stored.weights.lmHead, stored.weights.embed, 'tied: the lm head is the embedding\'s one stored copy');
    assert.ok(l.router instanceof Float32Array && f32.weights.embed instanceof Float32Array, 'routers stay float32, and so does all of the float32 load');
    assert.ok(heldBytes(stored.weights) < 0.52 * heldBytes(f32.weights), `held ${heldBytes(stored.weights)} vs ${heldBytes(f32.weights)}`);
    const want = await run(f32.spec, f32.weights, { threads: 1 });
    for (const opts of [{ threads: 1 }, { threads: 2 }, { threads: 1, simd: false }, { threads: 2, simd: false }]) {
      const calls = simdBf16Calls();
      assert.ok((await run(stored.spec, stored.weights, opts)).equals(want), JSON.stringify(opts));
      // SIMD on: the bf16 rows (lm head, projections, experts) ran in the kernel's bf16 linear, as stored.
      if (lastSimd) assert.ok(simdBf16Calls() - calls > 100, `${JSON.stringify(opts)}: ${simdBf16Calls() - calls} bf16 kernel calls`);
      else assert.equal(simdBf16Calls(), calls);
    }
  });

  it('takeExperts with SIMD: the loaded weights then point at the kernel-memory copies (the originals are freed), outputs unchanged', async () => {
    const [f32, stored] = await Promise.all([loadModel(SHIPPED_MODEL, { raw: false }), loadModel(SHIPPED_MODEL, { raw: false, bf16: 'stored' })]);
    const want = await run(f32.spec, f32.weights, { threads: 1 });
    const before = stored.weights.layers.map((l) => [l.qProj, l.kProj, l.vProj, l.oProj]);
    const head = stored.weights.lmHead;
    const wasm = (m: unknown): boolean => (m as { data: Uint16Array }).data.buffer instanceof SharedArrayBuffer;
    assert.ok(!wasm(head) && before.flat().every((m) => !wasm(m)), 'loaded: in their own buffers');
    assert.ok((await run(stored.spec, stored.weights, { threads: 2, simd: true, takeExperts: true })).equals(want));
    const w = stored.weights;
    assert.ok(w.lmHead !== head && wasm(w.lmHead) && w.embed === w.lmHead, 'the tied lm head and embedding: one copy, in the kernel\'s memory');
    w.layers.forEach((l, i) => [l.qProj, l.kProj, l.vProj, l.oProj].forEach((m, j) => assert.ok(m !== before[i]![j] && wasm(m), `layer ${i} projection ${j}`)));
  });

  it('untied: the embedding and lm head are two bf16 matrices as stored, outputs byte-identical to the float32 conversion (1 and 2 threads, SIMD on and off)', async () => {
    // hidden 20: rows off a multiple of the SIMD kernel's width.
    const config = syntheticConfig({ tie_word_embeddings: false, hidden_size: 20, vocab_size: 300, num_experts: 8, num_experts_per_tok: 3 });
    await withTempDir(async (dir) => {
      await writeSyntheticCheckpoint(dir, { config, seed: 11 });
      const [f32, stored] = await Promise.all([loadModel(dir, { raw: false }), loadModel(dir, { raw: false, bf16: 'stored' })]);
      const { embed, lmHead } = stored.weights;
      assert.ok(!(embed instanceof Float32Array) && !(lmHead instanceof Float32Array) && embed.format === 'bf16' && lmHead.format === 'bf16' && embed !== lmHead);
      assert.equal(heldBytes(f32.weights) - heldBytes(stored.weights) > 2 * 2 * 300 * 20 - 1, true, 'both vocabulary matrices at 2 bytes a value');
      const want = await run(f32.spec, f32.weights, { threads: 1 }, 5);
      for (const opts of [{ threads: 1 }, { threads: 2 }, { threads: 1, simd: false }, { threads: 2, simd: false }]) {
        assert.ok((await run(stored.spec, stored.weights, opts, 5)).equals(want), JSON.stringify(opts));
      }
    });
  });

  it('loadModelFor cpu reads bf16 kept as stored straight into the kernel\'s memory, which a backend taking the weights adopts (no copy); outputs unchanged', async () => {
    const before = process.env.RESIDENCY_CPU_BF16;
    process.env.RESIDENCY_CPU_BF16 = 'stored';
    try {
      const [f32, stored] = await Promise.all([loadModel(SHIPPED_MODEL, { raw: false }), loadModelFor(SHIPPED_MODEL, 'cpu')]);
      const memory = stored.weights.bf16Memory;
      if (!resolveSimd(undefined, 0)) {
        // RESIDENCY_CPU_SIMD=0: no kernel, so no kernel memory; the heap as before.
        assert.equal(memory, undefined);
        assert.ok((await run(stored.spec, stored.weights, { threads: 2, takeExperts: true })).equals(await run(f32.spec, f32.weights, { threads: 1 })));
        return;
      }
      assert.ok(memory instanceof WasmArena, 'the kernel\'s memory');
      const l = stored.weights.layers[2]!;
      const mats = [stored.weights.lmHead, l.qProj, l.kProj, l.vProj, l.oProj] as Bf16Matrix[];
      assert.ok(mats.every((m) => m.format === 'bf16' && memory.holds(m.data)), 'read into it');
      const want = await run(f32.spec, f32.weights, { threads: 1 });
      assert.ok((await run(stored.spec, stored.weights, { threads: 2, simd: true, takeExperts: true })).equals(want));
      const after = stored.weights.layers[2]!;
      assert.ok(stored.weights.lmHead === mats[0] && after.qProj === mats[1] && after.oProj === mats[4], 'computed on in place: the same matrices');
      stored.tensors.close();
    } finally {
      if (before === undefined) delete process.env.RESIDENCY_CPU_BF16;
      else process.env.RESIDENCY_CPU_BF16 = before;
    }
  });

  it('a bf16 memory that runs out of room: the matrices past it load on the heap, outputs unchanged (a backend copies those into its arena)', async () => {
    const arena = new WasmArena();
    let room = 3; // the embedding and two projections
    const memory = { u16: (n: number) => (room-- > 0 ? arena.u16(n) : undefined) };
    const [f32, stored] = await Promise.all([loadModel(SHIPPED_MODEL, { raw: false }), loadModel(SHIPPED_MODEL, { raw: false, bf16: 'stored', streamExperts: true, bf16Memory: () => memory })]);
    const l0 = stored.weights.layers[0]!;
    const inArena = [stored.weights.embed, l0.qProj, l0.kProj, l0.vProj].map((m) => arena.holds((m as Bf16Matrix).data));
    assert.deepEqual(inArena, [true, true, true, false]);
    const want = await run(f32.spec, f32.weights, { threads: 1 });
    for (const opts of [{ threads: 1 }, { threads: 2, takeExperts: true }]) assert.ok((await run(stored.spec, stored.weights, opts)).equals(want), JSON.stringify(opts));
    stored.tensors.close();
  });

  it('odd expert shapes (up not right after gate in a bank row, tails in every product): the kernel\'s bf16 experts are byte-identical to float32 (1 and 2 threads)', async () => {
    // hidden 21, intermediate 5: 105 values a matrix, so each matrix's bytes end off a 4-byte boundary and the row
    // leaves a gap after gate (the kernel computes gate and up as two linears); every inDim has a tail mod 4.
    const config = syntheticConfig({ hidden_size: 21, moe_intermediate_size: 5, head_dim: 6, vocab_size: 300, num_experts: 6, num_experts_per_tok: 3, tie_word_embeddings: false });
    await withTempDir(async (dir) => {
      await writeSyntheticCheckpoint(dir, { config, seed: 12 });
      const [f32, stored] = await Promise.all([loadModel(dir, { raw: false }), loadModel(dir, { raw: false, bf16: 'stored', streamExperts: true })]);
      const want = await run(f32.spec, f32.weights, { threads: 1 }, 3);
      for (const opts of [{ threads: 1 }, { threads: 2 }]) {
        const b = createCpuBackend(stored.spec, stored.weights, { ...opts, placement: { hotPerLayer: 3 } });
        const q = b.banks.quant!;
        assert.ok(q.data[1] !== q.data[0] + 2 * 5 * 21, `gate ${q.data[0]}, up ${q.data[1]}: a gap between them`);
        b.dispose();
        const calls = simdBf16Calls();
        assert.ok((await run(stored.spec, stored.weights, opts, 3)).equals(want), JSON.stringify(opts));
        if (lastSimd) assert.ok(simdBf16Calls() > calls);
      }
      stored.tensors.close();
    });
  });

  it('what a bf16 memory receives: projections and the lm head, not loaded routed experts (they go to the banks) nor an untied embedding (looked up in JS)', async () => {
    const config = syntheticConfig({ tie_word_embeddings: false, hidden_size: 20, vocab_size: 300, num_experts: 8, num_experts_per_tok: 3 });
    await withTempDir(async (dir) => {
      await writeSyntheticCheckpoint(dir, { config, seed: 13 });
      const arena = new WasmArena();
      const [f32, stored] = await Promise.all([loadModel(dir, { raw: false }), loadModel(dir, { raw: false, bf16: 'stored', streamExperts: false, bf16Memory: () => arena })]);
      const w = stored.weights;
      const held = (m: unknown): boolean => arena.holds((m as Bf16Matrix).data);
      assert.ok(held(w.lmHead) && !held(w.embed), 'the lm head in it, the untied embedding not');
      const l = w.layers[1]!;
      assert.ok([l.qProj, l.kProj, l.vProj, l.oProj].every(held), 'the projections in it');
      assert.ok(l.experts.every((e) => !held(e.gate) && !held(e.up) && !held(e.down)), 'loaded experts not in it');
      const want = await run(f32.spec, f32.weights, { threads: 1 }, 5);
      assert.ok((await run(stored.spec, stored.weights, { threads: 2, takeExperts: true }, 5)).equals(want));
    });
  });

  it('a NaN kept as stored is refused at load naming the tensor, as the float32 conversion does', async () => {
    const name = 'model.layers.1.mlp.experts.2.up_proj.weight';
    await withTempDir(async (dir) => {
      await writeSyntheticCheckpoint(dir, {
        config: syntheticConfig(),
        edit: (ts) => ts.map((t) => (t.name === name ? { ...t, bytes: Uint8Array.from(t.bytes, (b, i) => (i === 9 ? 0x7f : i === 8 ? 0xc0 : b)) } : t)),
      });
      await rejectsWith(loadModel(dir, { bf16: 'stored' }), 'BAD_CHECKPOINT', new RegExp(`"${name.replace(/\./g, '\\.')}": element 4 of 6x8 is NaN`));
    });
  });

  it('auto keeps bf16 as stored only past the SIMD kernel\'s reach (Qwen3-30B-A3B layer shapes x 2), float32 below it', async () => {
    const tiny = (await loadModel(SHIPPED_MODEL, { stream: true })).spec;
    const reach = cpuBf16Placement().bf16AutoBytes;
    assert.equal(bf16Policy('auto', tiny, reach), 'float32');
    const real = parseConfig(syntheticConfig({
      vocab_size: 32768, hidden_size: 2048, num_hidden_layers: 2, num_attention_heads: 32, num_key_value_heads: 4,
      head_dim: 128, moe_intermediate_size: 768, num_experts: 128, num_experts_per_tok: 8, tie_word_embeddings: false,
    }), 'real');
    assert.equal(bf16Policy('auto', real, reach), 'stored');
    assert.equal(bf16Policy('auto', real), 'float32', 'auto without a reach (no CPU backend asking): float32');
    assert.equal(bf16Policy('float32', real), 'float32');
    assert.equal(bf16Policy(undefined, real), 'float32', 'loadModel without the option: float32 as before');
    assert.equal(bf16Policy('stored', tiny), 'stored');
  });

  it('RESIDENCY_CPU_BF16: auto (default), float32 or stored; anything else is refused naming it', () => {
    const before = process.env.RESIDENCY_CPU_BF16;
    try {
      delete process.env.RESIDENCY_CPU_BF16;
      assert.equal(bf16FromEnv(), 'auto');
      process.env.RESIDENCY_CPU_BF16 = 'stored';
      assert.equal(bf16FromEnv(), 'stored');
      process.env.RESIDENCY_CPU_BF16 = 'float32';
      assert.equal(bf16FromEnv(), 'float32');
      process.env.RESIDENCY_CPU_BF16 = 'half';
      assert.throws(() => bf16FromEnv(), /RESIDENCY_CPU_BF16 half: expected float32, stored or auto/);
    } finally {
      if (before === undefined) delete process.env.RESIDENCY_CPU_BF16;
      else process.env.RESIDENCY_CPU_BF16 = before;
    }
  });
});
