// The host expert lane alone, without the GPU: requests posted from here into its mailbox (as op_route_group posts
// them), answered by its threads from a cold bank of real-size experts in pinned memory, timed one by one. What a
// layer's host share costs on this machine (the figures of the hardware probe it replaced: docs/results/tiered/host-lane-2026-12-02.md).
// --batch B: each expert picked by each of B rows (a decode step of B sequences that share its cold experts).
// --quarters: at batch 1, 0.25 to 3 experts in quarters (whole experts and the first quarters of one more, split with
// a GPU that hands its units over at once: the host's side of a split expert, exchange included).
//   node dist/bench-host-lane.mjs [--hidden 2048] [--inter 768] [--rows 256] [--threads N] [--reps 200] [--no-prefetch] [--batch 1,4] [--quarters]
import { parseArgs } from 'node:util';
import { loadDriver } from '../../src/backend/cuda/driver/driver.ts';
import { HostExpertLane, loadHostLaneLib } from '../../src/backend/cuda/host-lane/lane.ts';

const { values: v } = parseArgs({ options: {
  hidden: { type: 'string', default: '2048' }, inter: { type: 'string', default: '768' }, rows: { type: 'string', default: '256' }, threads: { type: 'string' }, reps: { type: 'string', default: '200' },
  'no-prefetch': { type: 'boolean', default: false }, batch: { type: 'string', default: '1,4' }, quarters: { type: 'boolean', default: false },
} });
const H = Number(v.hidden), I = Number(v.inter), rows = Number(v.rows), reps = Number(v.reps);
const rowBytes = 3 * H * I * 2;
const d = await loadDriver();
const lib = await loadHostLaneLib();
const layers = 4, per = Math.ceil(rows / layers);
const banks = Array.from({ length: layers }, (_, l) => {
  const b = d.allocMappedHost(per * rowBytes, `cold bank ${l}`);
  new Uint16Array(b.host.buffer, b.host.byteOffset, b.host.byteLength / 2).fill(0x3c01);
  return b;
});
const lane = new HostExpertLane(lib, d, { hiddenSize: H, intermediate: I, layers, hotRows: 0, coldRows: per, rowBytes, at: { gate: 0, up: 2 * I * H, down: 4 * I * H }, coldHost: banks.map((b) => b.hostPtr) },
  { ...(v.threads ? { threads: Number(v.threads) } : {}), prefetch: !v['no-prefetch'] });
const batches = v.batch.split(',').map(Number);
const x = new Float32Array(Math.max(...batches) * H).fill(0.5);
let next = 0;
console.log(`host lane: ${lane.threads} threads (${lane.simd ? 'AVX-512' : 'reference'}${v['no-prefetch'] ? ', no prefetch' : ', prefetch'}), experts of ${(rowBytes / 2 ** 20).toFixed(2)} MiB cycled over ${rows} cold rows`);
console.log('| rows | experts | us a request (median) | p90 | GB/s (weights) |');
console.log('|---|---|---|---|---|');
for (const b of batches) for (const n of [1, 2, 3, 4]) {
  const us: number[] = [];
  for (let r = 0; r < reps + 10; r++) {
    const experts = Array.from({ length: n }, () => next++ % per);
    const slots = Array.from({ length: b }, () => experts).flat();
    const t0 = performance.now();
    const seq = lane.post(r % layers, slots, { k: n, ...(r === 0 ? { x } : {}) });
    while (!lane.answered(seq)) { /* spin */ }
    if (r >= 10) us.push((performance.now() - t0) * 1000);
  }
  us.sort((p, q) => p - q);
  const med = us[us.length >> 1]!;
  console.log(`| ${b} | ${n} | ${med.toFixed(0)} | ${us[Math.floor(us.length * 0.9)]!.toFixed(0)} | ${((n * rowBytes) / (med * 1e-6) / 1e9).toFixed(1)} |`);
}
if (v.quarters) {
  console.log('| experts (in quarters) | us a request (median) | p90 |');
  console.log('|---|---|---|');
  for (let q = 1; q <= 12; q++) {
    const whole = Math.floor(q / 4), part = q % 4;
    const us: number[] = [];
    for (let r = 0; r < reps + 10; r++) {
      const experts = Array.from({ length: whole + (part ? 1 : 0) }, () => next++ % per);
      const split = part ? { slot: experts[whole]!, units: (part * I) / 4, features: (part * H) / 4 } : undefined;
      const t0 = performance.now();
      const seq = lane.post(r % layers, experts, { k: experts.length, ...(split ? { split } : {}) });
      if (split) {
        while (!lane.hostUnitsIn(seq)) { /* spin */ }
        lane.gpuUnitsIn(seq);
      }
      while (!lane.answered(seq)) { /* spin */ }
      if (r >= 10) us.push((performance.now() - t0) * 1000);
    }
    us.sort((a, b) => a - b);
    console.log(`| ${q / 4} | ${us[us.length >> 1]!.toFixed(0)} | ${us[Math.floor(us.length * 0.9)]!.toFixed(0)} |`);
  }
}
lane.check();
lane.dispose();
for (const b of banks) d.freeHost(b.hostPtr);
