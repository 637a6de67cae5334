// GPU decode benchmark (`npm run bench:gpu`, or `node dist/bench-gpu.mjs` on the GPU machine): tok/s at 1, 4
// and 16 sequences, graph replay vs eager step time, long contexts (pos 1024 and 2047, attention split on
// and off), the counter's on/off cost in the same graph, and
// per-kernel times (the expert FFN against the bytes it must read). Times are CUDA events around many
// back-to-back steps (device time) plus host loops (end-to-end). Writes $OUT/bench-gpu.json when OUT is set.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModel } from '../../src/model/load.ts';
import { createCudaBackend, type CudaBackend } from '../../src/backend/cuda/cuda-backend.ts';
import type { PlannedRow } from '../../src/backend/cuda/plan.ts';

const HBM_BYTES_PER_S = 4.3e12; // device copy bandwidth measured on this H200 (design.md section 2)
const dir = process.env['MOE_MODEL_DIR'] ?? 'models/tiny-moe';
const STEPS = Number(process.env['BENCH_STEPS'] ?? 1000);

const m = await loadModel(dir, { weights: false });
// `be`: the fused path (decode_layers; its phase clocks and the fused column); `layered`: the default.
const be = await createCudaBackend(m, { fused: true });
const layered = await createCudaBackend(m, { fused: false });
// The layered path with the flash-decoding split turned off (one block walks every position): the A/B of
// the split at long contexts.
const noSplit = await createCudaBackend(m, { fused: false, attnSplits: 1 });
const d = be.driver;
const mainBe = be;
const results: Record<string, unknown> = { device: d.deviceName, sms: d.smCount, steps: STEPS };
const rows: string[][] = [];
const median = (a: number[]): number => [...a].sort((x, y) => x - y)[a.length >> 1]!;

/** Opens `n` sequences, prefills 4 tokens each; returns the rows of one decode sub-step at position `pos`. */
let nextSeq = 0;
function openBatch(n: number, be: CudaBackend = mainBe): { seqs: number[]; rowsAt(pos: number, toks: number[]): PlannedRow[] } {
  const seqs = Array.from({ length: n }, () => nextSeq++);
  for (const s of seqs) be.openSequence(s, m.spec.maxPositions);
  be.forward({ chunks: seqs.map((s, i) => ({ seq: s, tokens: [1 + i, 2, 3, 4], startPos: 0 })), count: false });
  return {
    seqs,
    rowsAt: (pos, toks) => seqs.map((s, i) => ({ chunk: i, tokenIndex: i, seq: s, token: toks[i]!, pos, last: true })),
  };
}

/** A start and an end event for `fn`, destroyed afterwards whatever happens (the benchmark creates hundreds). */
function withEvents<T>(fn: (t0: bigint, t1: bigint) => T): T {
  const t0 = d.eventCreate();
  try {
    const t1 = d.eventCreate();
    try {
      return fn(t0, t1);
    } finally {
      d.eventDestroy(t1);
    }
  } finally {
    d.eventDestroy(t0);
  }
}

/** Device time per step (µs) over `iters` back-to-back replays of one prepared step, median of 5 runs. */
function replayUs(rowsIn: PlannedRow[], count: boolean, iters: number, graphs: boolean, be: CudaBackend = mainBe): number {
  be.useGraphs = graphs;
  return withEvents((t0, t1) => {
    be.runRows(rowsIn, count); // warm-up (captures the graph on first use)
    d.streamSync(be.stream, 'warm');
    const runs: number[] = [];
    for (let r = 0; r < 5; r++) {
      d.eventRecord(t0, be.stream);
      for (let i = 0; i < iters; i++) be.runRows(rowsIn, count);
      d.eventRecord(t1, be.stream);
      runs.push((d.eventElapsed(t0, t1) * 1000) / iters);
    }
    be.useGraphs = true;
    return median(runs);
  });
}

/** One kernel alone, `iters` launches between events (eager launches: includes launch overhead). */
type K = 'decode_layers' | 'attn_route' | 'expert_ffn' | 'lm_head_argmax';
function kernelUs(name: K, bucket: number, iters: number, be: CudaBackend = mainBe): number {
  return withEvents((t0, t1) => {
    be.enqueueKernel(name, bucket, 0);
    const runs: number[] = [];
    for (let r = 0; r < 3; r++) {
      d.eventRecord(t0, be.stream);
      for (let i = 0; i < iters; i++) be.enqueueKernel(name, bucket, 0);
      d.eventRecord(t1, be.stream);
      runs.push((d.eventElapsed(t0, t1) * 1000) / iters);
    }
    return median(runs);
  });
}

/** Same kernel captured `iters` times in one graph: per-kernel time without host launch overhead. */
function kernelGraphUs(name: K, bucket: number, iters: number, be: CudaBackend = mainBe, grid: 'short' | 'long' = 'short'): number {
  const g = d.captureGraph(be.stream, () => { for (let i = 0; i < iters; i++) be.enqueueKernel(name, bucket, 0, be.fused, grid); }, `${name} x${iters}`);
  try {
    return withEvents((t0, t1) => {
      d.graphLaunch(g, be.stream);
      const runs: number[] = [];
      for (let r = 0; r < 5; r++) {
        d.eventRecord(t0, be.stream);
        d.graphLaunch(g, be.stream);
        d.eventRecord(t1, be.stream);
        runs.push((d.eventElapsed(t0, t1) * 1000) / iters);
      }
      return median(runs);
    });
  } finally {
    d.graphDestroy(g);
  }
}

// Where decode_layers spends its cycles: phase boundaries of row 0 (clock64), averaged over layers.
{
  const b = openBatch(1);
  const rowsP = b.rowsAt(64, [100]);
  be.runRows(rowsP, false);
  const marks = be.profileStep(rowsP);
  const names = ['in-norm', 'qkv gemv', 'q/k norm+rope', 'kv write+scores', 'softmax+values', 'o_proj+residual', 'post-norm+router', 'route+count', 'expert gate/up', 'silu+down', 'combine'];
  const phase = names.map((_, i) => marks.reduce((a, mk) => a + (mk[i + 1]! - mk[i]!), 0) / marks.length);
  const layerCycles = marks.reduce((a, mk) => a + (mk[11]! - mk[0]!), 0) / marks.length;
  results['decodeLayersPhaseCycles'] = Object.fromEntries(names.map((n, i) => [n, phase[i]]));
  rows.push(['decode_layers phases (cycles/layer, pos 64)', ...names.map((n, i) => `${n} ${phase[i]!.toFixed(0)}`), `layer total ${layerCycles.toFixed(0)}`]);
  for (const s of b.seqs) be.closeSequence(s);
}
// Threads per row block: A/B of the fused and layered paths at batch 1 (graph replay, position 64).
{
  const tuning: Record<string, number> = {};
  const cells: string[] = [];
  for (const fused of [true, false]) {
    for (const rowThreads of [256, 512, 1024]) {
      const alt = await createCudaBackend(m, { fused, rowThreads });
      const b = openBatch(1, alt);
      const us = replayUs(b.rowsAt(64, [100]), true, STEPS, true, alt);
      tuning[`${fused ? 'fused' : 'layered'}_${rowThreads}`] = us;
      cells.push(`${fused ? 'fused' : 'layered'}/${rowThreads} ${us.toFixed(1)} us`);
      alt.dispose();
    }
  }
  results['rowThreadsBatch1'] = tuning;
  rows.push(['row threads (batch 1 graph step)', ...cells]);
}
const perBatch: Record<string, unknown> = {};
for (const n of [1, 4, 16]) {
  const b = openBatch(n); // fused backend
  const bl = openBatch(n, layered); // the default (layered) backend
  const toks0 = b.seqs.map((_, i) => 100 + i);
  const short = bl.rowsAt(64, toks0); // a step at position 64 (KV cache rows 0..64 read)
  const graphUs = replayUs(short, true, STEPS, true, layered);
  const eagerUs = replayUs(short, true, Math.min(STEPS, 500), false, layered);
  const longUs = replayUs(bl.rowsAt(1024, toks0), true, STEPS, true, layered);
  // The longest context the fixture holds (max_position_embeddings 2048), and pos 1024 with the split off.
  const lastPos = m.spec.maxPositions - 1;
  // Fewer replays (each replayUs runs 5 x iters): a split-off step at pos 2047 is ~1 ms at batch 16.
  const longIters = Math.min(STEPS, 200);
  const longestUs = replayUs(bl.rowsAt(lastPos, toks0), true, longIters, true, layered);
  const bn = openBatch(n, noSplit);
  const longNoSplitUs = replayUs(bn.rowsAt(1024, toks0), true, longIters, true, noSplit);
  const longestNoSplitUs = replayUs(bn.rowsAt(lastPos, toks0), true, longIters, true, noSplit);
  for (const s of bn.seqs) noSplit.closeSequence(s);
  const fusedUs = replayUs(b.rowsAt(64, toks0), true, STEPS, true);
  const fusedEagerUs = replayUs(b.rowsAt(64, toks0), true, Math.min(STEPS, 500), false);
  // End to end on the default backend: a host greedy loop (device argmax, token fed back) and a forward()
  // loop (logits copied back), positions 4..1003 (a 1000-token generation).
  let toks = toks0;
  const loop = 1000;
  let t = performance.now();
  for (let s = 0; s < loop; s++) {
    const out = layered.forward({ chunks: bl.seqs.map((seq, i) => ({ seq, tokens: [toks[i]!], startPos: 4 + s })), count: true, argmaxOnly: true }).argmax!;
    toks = Array.from(out);
  }
  const greedyMs = (performance.now() - t) / loop;
  t = performance.now();
  for (let s = 0; s < loop; s++) layered.forward({ chunks: bl.seqs.map((seq, i) => ({ seq, tokens: [toks[i]!], startPos: 4 + s })), count: true });
  const fwdMs = (performance.now() - t) / loop;
  const rec = {
    graphStepUs: graphUs, eagerStepUs: eagerUs, graphTokPerS: (n * 1e6) / graphUs, graphStepUsAtPos1024: longUs,
    graphStepUsAtPos1024SplitOff: longNoSplitUs, [`graphStepUsAtPos${lastPos}`]: longestUs, [`graphStepUsAtPos${lastPos}SplitOff`]: longestNoSplitUs,
    attnSplitsMax: layered.attnSplits(n),
    fusedGraphStepUs: fusedUs, fusedEagerStepUs: fusedEagerUs,
    greedyLoopTokPerS: (n * 1000) / greedyMs, forwardLoopTokPerS: (n * 1000) / fwdMs,
  };
  perBatch[n] = rec;
  rows.push([`decode batch ${n}`, `graph ${graphUs.toFixed(1)} us/step = ${rec.graphTokPerS.toFixed(0)} tok/s (pos 64)`, `pos 1024 ${longUs.toFixed(1)} us (split off ${longNoSplitUs.toFixed(1)})`,
    `pos ${lastPos} ${longestUs.toFixed(1)} us (split off ${longestNoSplitUs.toFixed(1)})`, `eager ${eagerUs.toFixed(1)} us`,
    `fused graph ${fusedUs.toFixed(1)} / eager ${fusedEagerUs.toFixed(1)} us`, `host greedy loop ${rec.greedyLoopTokPerS.toFixed(0)} tok/s`, `forward() loop ${rec.forwardLoopTokPerS.toFixed(0)} tok/s`]);
  // Counter A/B in the same graph (default backend): alternating blocks of 500 replays, ratio of medians.
  layered.runRows(short, false);
  d.streamSync(layered.stream, 'ab');
  {
    const on: number[] = [], off: number[] = [];
    for (let r = 0; r < 6; r++) { on.push(replayUs(short, true, 500, true, layered)); off.push(replayUs(short, false, 500, true, layered)); }
    const ratio = median(on) / median(off);
    results[`counterAB_batch${n}`] = { onUs: median(on), offUs: median(off), ratio, on, off };
    rows.push([`counter A/B batch ${n}`, `on ${median(on).toFixed(2)} us`, `off ${median(off).toFixed(2)} us`, `ratio ${ratio.toFixed(4)}`]);
  }
  be.runRows(b.rowsAt(64, toks0), true);
  // Per-kernel time (each kernel captured 200x in one graph, at position 64); the expert FFN against the
  // bytes it must read (each pick one expert row of 3 x I x H bf16).
  layered.runRows(short, true);
  d.streamSync(be.stream, 'k');
  d.streamSync(layered.stream, 'k');
  const fusedK = kernelGraphUs('decode_layers', n, 200);
  const head = kernelGraphUs('lm_head_argmax', n, 200);
  const ffn = kernelGraphUs('expert_ffn', n, 200, layered);
  const attn = kernelGraphUs('attn_route', n, 200, layered);
  // The same pos-64 step on the split grid (rows x max splits, every block past the first exits at once):
  // what a short step cost before the host chose the grid per sub-step.
  const attnLongGrid = kernelGraphUs('attn_route', n, 200, layered, 'long');
  const ffnEager = kernelUs('expert_ffn', n, 200, layered);
  const picks = n * m.spec.topK;
  const bytes = picks * be.banks.rowBytes;
  const headBytes = m.spec.vocabSize * m.spec.hiddenSize * 2;
  results[`kernels_batch${n}`] = {
    decodeLayersUs: fusedK, expertFfnUs: ffn, expertFfnEagerUs: ffnEager, expertFfnBytes: bytes, expertFfnFractionOfHbm: bytes / (ffn * 1e-6) / HBM_BYTES_PER_S,
    attnRouteUs: attn, attnRouteLongGridUs: attnLongGrid, lmHeadArgmaxUs: head, lmHeadBytes: headBytes, lmHeadFractionOfHbm: headBytes / (head * 1e-6) / HBM_BYTES_PER_S,
  };
  rows.push([`kernels batch ${n}`, `decode_layers (6 layers) ${fusedK.toFixed(2)} us`, `expert_ffn ${ffn.toFixed(2)} us (${(bytes / 1024).toFixed(0)} KiB: ${((100 * bytes) / (ffn * 1e-6) / HBM_BYTES_PER_S).toFixed(2)}% of 4.3 TB/s)`,
    `attn_route ${attn.toFixed(2)} us (split grid ${attnLongGrid.toFixed(2)})`, `lm_head_argmax ${head.toFixed(2)} us (${((100 * headBytes) / (head * 1e-6) / HBM_BYTES_PER_S).toFixed(1)}% of HBM)`]);
  for (const s of b.seqs) be.closeSequence(s);
  for (const s of bl.seqs) layered.closeSequence(s);
}
results['perBatch'] = perBatch;
// Cold bank in mapped pinned host memory (issue 6 preview): the first 49 experts of each layer hot (the
// 295/384 ratio), the rest read in place over PCIe by the expert kernel. Same graph shape, same results.
{
  const cold = await createCudaBackend(m, { placement: { hotPerLayer: 49 } });
  const cells: string[] = [];
  const rec: Record<string, unknown> = {};
  for (const n of [1, 16]) {
    const bc = openBatch(n, cold);
    const bh = openBatch(n, layered);
    const toks = bc.seqs.map((_, i) => 100 + i);
    // Count this step's cold picks from its routing (fixture routing at these tokens).
    const out = cold.forward({ chunks: bc.seqs.map((seq, i) => ({ seq, tokens: [toks[i]!], startPos: 4 })), count: false, recordRouting: true });
    let coldPicks = 0;
    const L = m.spec.numLayers, K = m.spec.topK;
    for (let i = 0; i < out.routing!.length; i++) if (cold.banks.slotOf(Math.floor(i / K) % L, out.routing![i]!) >= 49) coldPicks++;
    const coldUs = replayUs(bc.rowsAt(4, toks), true, STEPS, true, cold);
    const hotUs = replayUs(bh.rowsAt(4, toks), true, STEPS, true, layered);
    const ffnCold = kernelGraphUs('expert_ffn', n, 200, cold);
    rec[`batch${n}`] = { coldStepUs: coldUs, allHotStepUs: hotUs, coldPicks, picks: out.routing!.length, expertFfnColdUs: ffnCold };
    cells.push(`batch ${n}: ${coldPicks}/${out.routing!.length} picks cold, step ${coldUs.toFixed(1)} us vs all-hot ${hotUs.toFixed(1)} us, expert_ffn (layer-0 bank, last step's slots) ${ffnCold.toFixed(2)} us`);
  }
  results['coldBank49'] = rec;
  rows.push(['cold bank (hot 49/64, mapped host)', ...cells]);
  cold.dispose();
}
be.dispose();
layered.dispose();
noSplit.dispose();
if (process.env['OUT']) writeFileSync(join(process.env['OUT'], 'bench-gpu.json'), JSON.stringify(results, null, 2));
console.log(`\nGPU decode benchmark: ${d.deviceName}, tiny-moe (${m.spec.numLayers} layers, ${m.spec.numExperts} experts top-${m.spec.topK}), ${STEPS} replays`);
for (const r of rows) console.log(r.join(' | '));
