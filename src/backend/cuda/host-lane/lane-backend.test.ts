// The host expert lane on the fake driver (its kernels are no-ops and its lane a stub: the lane's arithmetic
// is host-experts.test.ts's, its run on the device test/gpu/tiered-real.gpu.ts's): what a decode step launches with
// the lane, what other steps keep, which models it refuses, and that dispose stops it before anything is freed.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { familyCheckpoint } from '../../../../fixtures/fixture-paths.ts';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectedTensors } from '../../../model/architecture.ts';
import type { RawTensor } from '../../../model/weights.ts';
import { mapTensorSource } from '../../../model/tensor-source.ts';
import { syntheticModel } from '../../cpu/synthetic.ts';
import { FakeCudaDriver } from '../driver/fake-driver.ts';
import { KERNEL_GROUPS } from '../driver/kernels.ts';
import { CudaBackend, type CudaBackendOptions } from '../cuda-backend.ts';
import { HOST_STATE, hostLaneRefusal, hostThreadsNote, MAILBOX, SPLIT_UPDATE_STEPS, type HostLaneLib } from './lane.ts';
import { laneRow } from './lane-row.ts';
import { fp8Grid } from '../weights/fp8-grid.ts';
import { fixedTakes, MAX_PARTS, START_SHARE } from './split.ts';
import { expertRowLayout } from '../weights/device-weights.ts';
import { bySequence, type SequenceBackend } from '../../sequences.ts';
import { loadModel } from '../../../model/load.ts';

const kernelDir = mkdtempSync(join(tmpdir(), 'cuda-host-lane-'));
for (const group of Object.keys(KERNEL_GROUPS)) writeFileSync(join(kernelDir, `${group}.fatbin`), 'fake');
after(() => rmSync(kernelDir, { recursive: true, force: true }));

function model(topK: number) {
  const { spec } = syntheticModel({ hiddenSize: 64, headDim: 64, numHeads: 2, numKvHeads: 1, expertIntermediate: 32, numExperts: 8, topK, tieWordEmbeddings: false });
  const raw = new Map<string, RawTensor>();
  for (const [name, shape] of expectedTensors(spec)) raw.set(name, { name, dtype: 'BF16', shape, bytes: new Uint8Array(2 * shape.reduce((a, b) => a * b, 1)) });
  return { spec, raw };
}
const { spec, raw } = model(2);

/** A lane library that starts no threads and records what it was given. */
function stubLib(simd = 1) {
  const calls: { start: unknown[][]; stops: bigint[] } = { start: [], stops: [] };
  const lib: HostLaneLib = {
    path: 'stub',
    simdAvailable: () => false,
    expert: () => { throw new Error('not in this test'); },
    address: () => 0n,
    fns: {
      start: (...a: unknown[]) => { calls.start.push(a); return 77n; },
      stop: (h: unknown) => { calls.stops.push(h as bigint); },
      stats: () => undefined,
      laneSimd: () => simd,
    },
  };
  return { lib, calls };
}

function build(opts: CudaBackendOptions, m = { spec, raw }) {
  const d = new FakeCudaDriver();
  const be = bySequence(new CudaBackend(d, m.spec, mapTensorSource(m.raw), { kernelDir, placement: { hotPerLayer: 6 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32, ...opts, tuning: { graphs: false, ...opts.tuning } }));
  return { d, be };
}

/** The launches of one decode step of `rows` sequences (after their 2-token prefill). */
function decodeLaunches(d: FakeCudaDriver, be: SequenceBackend<CudaBackend>, rows: number) {
  for (let i = 0; i < rows; i++) be.openSequence(i, 64);
  be.forward({ chunks: Array.from({ length: rows }, (_, seq) => ({ seq, tokens: [1, 2], startPos: 0 })), count: false });
  const from = d.launches.length;
  be.forward({ chunks: Array.from({ length: rows }, (_, seq) => ({ seq, tokens: [3], startPos: 2 })), count: true });
  for (let i = 0; i < rows; i++) be.closeSequence(i);
  return d.launches.slice(from);
}

/** steps(n) runs n one-token steps of sequence 0 (each a step the backend counts), reopening it as its positions run out. */
function decodeSteps(be: SequenceBackend<CudaBackend>) {
  let pos = 0;
  be.openSequence(0, 128);
  return (n: number): void => {
    for (let i = 0; i < n; i++) {
      if (pos === 128) { be.closeSequence(0); be.openSequence(0, 128); pos = 0; }
      be.forward({ chunks: [{ seq: 0, tokens: [3], startPos: pos++ }], count: true });
    }
  };
}

const hostPost = (l: { args: unknown[] }): Buffer => Buffer.from((l.args[2] as { bytes: Uint8Array }).bytes);

test('host lane: a decode step posts each MoE layer\'s cold experts (route_group\'s HostPost), exchanges a split expert\'s units between the products, collects after the down product, and combines in the next norm, at batch 1 and 2', () => {
  const { lib, calls } = stubLib();
  const threads = availableParallelism();
  const { d, be } = build({ hostExperts: { lib, threads, share: 0.5 } });
  const lane = be.hostLane!;
  assert.ok(lane && lane.threads === threads && lane.simd);
  assert.match(be.hotReason, new RegExp(`host expert lane: ${threads} threads \\(AVX-512\\) compute 50% of each layer's cold experts \\(in 4 parts an expert: one a layer may be split with the GPU\\) at decode steps of up to 8 rows`));
  const note = hostThreadsNote(threads); // every CPU a lane thread (null on a 1-CPU machine)
  if (note) assert.ok(be.hotReason.endsWith(`(${note})`), 'serve says what that leaves the engine');
  const [t0, H, I, layers, hotRows, coldRows, rowBytes] = calls.start[0]! as number[];
  assert.deepEqual([t0, H, I, layers, hotRows, coldRows, rowBytes], [threads, 64, 32, spec.numLayers, be.banks.hotRowsAllocated, 2, be.banks.rowBytes]);
  const m = (w: number) => ({ w, s: 0, s_rows: 0, s_cols: 0, s_ld: 0, b: -1, step: 1 });
  assert.deepEqual(calls.start[0]![7], { format: 0, pad: 0, limit: 0, alpha: 0, gate: m(0), up: m(2 * 32 * 64), down: m(4 * 32 * 64) }, 'bf16 rows: gate, up, down');
  assert.deepEqual([...(calls.start[0]![8] as BigUint64Array)], be.banks.coldHostAddresses(), 'the cold banks\' host addresses');

  for (const rows of [1, 2]) {
    const step = decodeLaunches(d, be, rows);
    const routes = step.filter((l) => l.name === 'op_route_group');
    assert.equal(routes.length, spec.numLayers);
    routes.forEach((r, m) => {
      const p = hostPost(r);
      assert.equal(p.readBigUInt64LE(0), lane.mailboxDev);
      assert.equal(p.readBigUInt64LE(8), lane.stateDev);
      assert.deepEqual([p.readInt32LE(24), p.readInt32LE(28), p.readInt32LE(32), p.readInt32LE(36)], [be.banks.hotRowsAllocated, 32, 64, m], 'hot rows, I, H, layer');
    });
    assert.equal(step.filter((l) => /_combine$/.test(l.name)).length, 0, 'no fused combine: the next norm combines');
    const names = step.map((l) => l.name);
    const collects = names.flatMap((n, i) => (n === 'op_host_collect' ? [i] : []));
    assert.equal(collects.length, spec.numLayers, `batch ${rows}: a collect a layer`);
    for (const i of collects) {
      assert.match(names[i - 1]!, new RegExp(`^op_gemv_b${rows}_r[12]_store$`), 'right after the down product');
      assert.equal(step[i]!.args[0] && (step[i]!.args[0] as { u64: bigint }).u64, lane.mailboxDev);
      // Between gate | up and down: the split expert's exchange; each product computes it from the split on.
      assert.equal(names[i - 2], 'op_host_exchange');
      assert.match(names[i - 3]!, new RegExp(`^op_gemv_b${rows}_r[12]_swiglu$`));
      const part = (l: { args: unknown[] }): bigint => Buffer.from((l.args[0] as { bytes: Uint8Array }).bytes).readBigUInt64LE(256);
      assert.equal(part(step[i - 3]!), lane.stateDev + BigInt(4 * HOST_STATE.splitGateUp), 'gate | up: {slot, first unit}');
      assert.equal(part(step[i - 1]!), lane.stateDev + BigInt(4 * HOST_STATE.splitDown), 'down: {slot, first feature}');
    }
    assert.equal(names.filter((n) => n === 'op_host_exchange').length, spec.numLayers);
    assert.equal(names.filter((n) => n === 'op_residual_norm').length, spec.numLayers + 1, 'each layer\'s picks combined by the next norm');
  }

  be.dispose();
  assert.deepEqual(calls.stops, [77n], 'the lane stopped');
  assert.deepEqual(d.liveByKind(), {}, 'mailbox and state freed with the rest');
});

test('host lane: every 64 steps the GPU\'s counts come back, and a split they move goes to the state\'s table ahead of the next step; a fixed share never moves', () => {
  const { lib } = stubLib();
  const { d, be } = build({ hostExperts: { lib }, maxModelLen: 128 });
  const lane = be.hostLane!;
  assert.match(be.hotReason, /compute a share chosen from the layers' measured times of each layer's cold experts/);
  const before = lane.stats().split;
  assert.equal(before.mode, 'measured');
  assert.deepEqual(before.take, Array.from(fixedTakes(START_SHARE, MAILBOX.maxPicks, MAX_PARTS)));
  assert.deepEqual(before.take.slice(0, 4), [0, 3, 5, 8], 'in quarters');
  const statsBytes = 4 * (HOST_STATE.words - HOST_STATE.waitStats);
  const steps = decodeSteps(be);
  steps(SPLIT_UPDATE_STEPS - 1);
  assert.ok(!d.dtohBytes.includes(statsBytes), 'nothing read back before the first update');
  steps(1);
  assert.equal(d.dtohBytes.filter((b) => b === statsBytes).length, 1, 'the GPU\'s counts copied back at the first update');
  const takeAt = lane.stateDev + BigInt(4 * HOST_STATE.take);
  assert.equal(d.htodCarried.filter((c) => c.dst === takeAt).length, 0, 'no table before anything is measured');
  // What that copy brought back (the fake driver copies nothing): layers of one cold expert ran 200 us with 3 of its
  // 4 parts on the host (c 1, h 3) and 150 us with 2 (h 2), and the GPU waited 5 us over the host's 20 layers, 2 us
  // for the host's units at 10 of them.
  const io = (lane as unknown as { io: { host: Uint8Array } }).io.host;
  const counts = new BigUint64Array(io.buffer, io.byteOffset + 256, statsBytes / 8);
  const cell = (c: number, h: number): number => 4 + (HOST_STATE.cellWords / 2) * (c * (MAX_PARTS * MAILBOX.maxPicks + 1) + h);
  counts[0] = 20n;
  counts[1] = 20n * 5000n;
  counts[2] = 10n;
  counts[3] = 10n * 2000n;
  for (const [c, h, n, ns] of [[1, 3, 20n, 200_000n], [1, 2, 10n, 150_000n]] as const) {
    counts.set([n, n * ns, n * (ns >> 10n) ** 2n], cell(c, h)); // {layers, ns, (ns / 1024)^2}: no spread
  }
  steps(SPLIT_UPDATE_STEPS - 1);
  const launchesBefore = d.launches.length;
  steps(1); // the second update: the new table is queued ahead of this step's launches, on its stream
  const after = lane.stats().split;
  assert.deepEqual(after.take.slice(0, 4), [0, 2, 5, 8], 'one cold expert: half on each side, measured faster');
  assert.equal(after.layerUs[1], 150);
  assert.deepEqual([after.hostLayers, after.meanWaitUs, after.splitLayers, after.meanUnitsWaitUs], [20, 5, 10, 2]);
  const sent = d.htodCarried.filter((c) => c.dst === takeAt);
  assert.equal(sent.length, 1, 'the new table queued once');
  assert.equal(sent[0]!.afterLaunches, launchesBefore, 'before the step\'s first kernel');
  assert.ok(d.launches.length > launchesBefore);
  assert.equal(sent[0]!.stream, (be as unknown as { stream: bigint }).stream, 'on the stream the step runs on');
  assert.deepEqual([...new Int32Array(sent[0]!.bytes.buffer, sent[0]!.bytes.byteOffset, MAILBOX.maxPicks + 1)], after.take);
  assert.equal(d.dtohBytes.filter((b) => b === statsBytes).length, 2, 'and the next copy of the counts');
  be.dispose();

  const f = build({ hostExperts: { lib, share: 0.5 }, maxModelLen: 128 });
  assert.match(f.be.hotReason, /compute 50% of each layer's cold experts/);
  decodeSteps(f.be)(2 * SPLIT_UPDATE_STEPS);
  const split = f.be.hostLane!.stats().split;
  assert.equal(split.mode, 'fixed');
  assert.deepEqual(split.take.slice(0, 5), [0, 2, 4, 6, 8], 'ceil(0.5 c) experts in quarters');
  assert.equal(f.d.htodCarried.filter((c) => c.dst === f.be.hostLane!.stateDev + BigInt(4 * HOST_STATE.take)).length, 0);
  f.be.dispose();
});

test('host lane: the device state\'s layout is host_exchange.cuh\'s (HOST_STATE)', () => {
  const header = readFileSync(new URL('../../../../kernels/host_exchange.cuh', import.meta.url), 'utf8');
  const defines = new Map<string, string>();
  for (const m of header.matchAll(/^#define (HOST_\w+) (.+)$/gm)) defines.set(m[1]!, m[2]!.trim());
  const value = (name: string): number => {
    const expr = defines.get(name)!.replace(/HOST_\w+/g, (n) => String(value(n)));
    assert.match(expr, /^[\d\s()+*]+$/, `${name}: ${expr}`);
    return Function(`return ${expr}`)() as number;
  };
  assert.deepEqual(
    {
      splitGateUp: value('HOST_SPLIT_GU'), splitDown: value('HOST_SPLIT_DOWN'), splitMask: value('HOST_SPLIT_MASK'), parts: value('HOST_PARTS_AT'),
      take: value('HOST_TAKE'), waitStats: value('HOST_WAIT_STATS'), cells: value('HOST_CELLS'), cellWords: value('HOST_CELL_WORDS'), words: value('HOST_STATE_WORDS'), explore: value('HOST_EXPLORE'),
    },
    { ...HOST_STATE },
  );
  assert.equal(value('HOST_MAX_PICKS'), MAILBOX.maxPicks);
  assert.equal(value('HOST_PARTS'), MAX_PARTS);
  // The mailbox's fields where host_exchange.cuh's static_assert puts them.
  for (const [field, at] of [['split_slot', MAILBOX.splitSlot], ['gpu_act_seq', MAILBOX.gpuActSeq], ['done_seq', MAILBOX.doneSeq], ['gpu_timeouts', MAILBOX.gpuTimeouts], ['host_act_seq', MAILBOX.hostActSeq]] as const) {
    assert.match(header, new RegExp(`offsetof\\(HostMailbox, ${field}\\) == ${at}\\b`), field);
  }
});

test('host lane: serve names a thread count above the default (the CPUs less 2) and what it leaves the engine', () => {
  assert.equal(hostThreadsNote(14, 16), null);
  assert.equal(hostThreadsNote(3, 16), null);
  assert.equal(hostThreadsNote(15, 16), '15 threads on 16 CPUs leave the engine\'s thread and the driver\'s one CPU (auto: 14 threads)');
  assert.equal(hostThreadsNote(16, 16), '16 threads on 16 CPUs leave the engine\'s thread and the driver\'s no CPU (auto: 14 threads)');
  assert.equal(hostThreadsNote(1, 2), null);
  assert.equal(hostThreadsNote(2, 2), '2 threads on 2 CPUs leave the engine\'s thread and the driver\'s no CPU (auto: 1 thread)');
});

test('host lane: a decode step of more than 32 picks (16 rows at top-4) posts nothing and collects nothing; 8 rows (32 picks) do', () => {
  const m4 = model(4);
  const { lib } = stubLib();
  // Every decode bucket on the gemv path (the 16-row one too), so only the 32-pick bound keeps the lane off there.
  const { d, be } = build({ hostExperts: { lib }, maxNumSeqs: 16, tuning: { tensorCoreDecodeRows: 0 } }, m4);
  assert.match(be.hotReason, /cold experts \(in 4 parts an expert: one a layer may be split with the GPU\) at decode steps of up to 8 rows/);
  const wide = decodeLaunches(d, be, 9); // the 16-row bucket: 64 picks
  assert.ok(wide.filter((l) => l.name === 'op_route_group').every((r) => hostPost(r).every((b) => b === 0)), '16 rows: no host lane');
  assert.equal(wide.filter((l) => l.name === 'op_host_collect' || l.name === 'op_host_exchange').length, 0);
  assert.ok(wide.filter((l) => /^op_gemv/.test(l.name)).every((l) => Buffer.from((l.args[0] as { bytes: Uint8Array }).bytes).readBigUInt64LE(256) === 0n), 'no split for the products');
  const eight = decodeLaunches(d, be, 8);
  assert.equal(eight.filter((l) => l.name === 'op_host_collect').length, m4.spec.numLayers);
  be.dispose();
});

test('host lane: with every expert hot there is nothing to compute (no lane, and serve says so); a share outside (0, 1] or more threads than CPUs is refused', () => {
  const { lib, calls } = stubLib();
  const without = build({});
  assert.match(without.be.hotReason, /; --host-experts auto would compute a share of the cold experts on this host's CPUs beside the GPU$/, 'serve names the lane where it would help');
  without.be.dispose();
  const allHot = build({ placement: { hotPerLayer: 8 } });
  assert.doesNotMatch(allHot.be.hotReason, /--host-experts/);
  allHot.be.dispose();
  const { be } = build({ placement: { hotPerLayer: 8 }, hostExperts: { lib } });
  assert.equal(be.hostLane, undefined);
  assert.match(be.hotReason, /host expert lane: off \(no expert is cold\)/);
  assert.equal(calls.start.length, 0);
  be.dispose();
  assert.throws(() => build({ hostExperts: { lib, share: 0 } }), /host experts: share must be in \(0, 1\], got 0/);
  assert.throws(() => build({ hostExperts: { lib, parts: 5 } }), /--host-expert-parts: expected an integer in 1\.\.4, got 5/);
  const whole = build({ hostExperts: { lib, parts: 1 } });
  assert.match(whole.be.hotReason, /of each layer's cold experts at decode steps/, 'whole experts: no split named');
  assert.equal(whole.be.hostLane!.stats().split.parts, 1);
  const step = decodeLaunches(whole.d, whole.be, 1);
  assert.equal(step.filter((l) => l.name === 'op_host_collect').length, spec.numLayers);
  assert.equal(step.filter((l) => l.name === 'op_host_exchange').length, 0, 'whole experts: no exchange');
  whole.be.dispose();
  assert.throws(() => build({ hostExperts: { lib, share: 1.5 } }), /share must be in \(0, 1\]/);
  assert.throws(() => build({ hostExperts: { lib, threads: availableParallelism() + 1 } }), /--host-experts: threads must be an integer in 1\.\.\d+ \(the CPUs this process may use\)/);
});

test('host lane: a host without the vector path is refused by name (unless the reference loop is asked for), and nothing is left', () => {
  const { lib, calls } = stubLib(0);
  const d = new FakeCudaDriver();
  assert.throws(() => new CudaBackend(d, spec, mapTensorSource(raw), { kernelDir, placement: { hotPerLayer: 6 }, maxModelLen: 64, maxNumSeqs: 2, maxPieceRows: 32, hostExperts: { lib } }),
    /--host-experts: this host cannot run the lane's vector path \(it needs AVX-512/);
  assert.deepEqual(calls.stops, [77n], 'the lane was stopped');
  assert.deepEqual(d.liveByKind(), {});
  const { be } = build({ hostExperts: { lib: stubLib(0).lib, simd: false } });
  assert.match(be.hotReason, /\(reference loop\)/);
  be.dispose();
});

test('host lane: refused by name for experts it cannot compute; block FP8 taken, its grids placed; gpt-oss MXFP4 taken (interleaved gate | up, biases, clamped SwiGLU), its rows placed', async () => {
  const row = expertRowLayout(mapTensorSource(raw), spec);
  assert.equal(hostLaneRefusal(spec, row), null);
  assert.match(hostLaneRefusal(spec, { ...row, format: 'int4' as never })!, /its experts are int4 \(the lane computes bf16, block-FP8 and MXFP4 experts\)/);
  // Block FP8 at H 64, I 32 in [128, 128] blocks: gate | up's grid has scale rows of gcd(128, 32) = 32 weight rows.
  const H = 64, I = 32;
  const fp8 = { ...row, format: 'fp8' as const, gateUp: { ...row.gateUp, grid: fp8Grid([I, I], H, [128, 128]) }, down: { ...row.down, grid: fp8Grid([H], I, [128, 128]) },
    downAt: 2 * I * H, gateUpGridAt: 3 * I * H, downGridAt: 3 * I * H + 8 };
  assert.equal(hostLaneRefusal(spec, fp8), null);
  assert.deepEqual(laneRow(fp8, spec), {
    gate: 0, up: I * H, down: 2 * I * H,
    scales: { gate: { at: 3 * I * H, rows: 32, cols: 128, ld: 1 }, up: { at: 3 * I * H + 4, rows: 32, cols: 128, ld: 1 }, down: { at: 3 * I * H + 8, rows: 128, cols: 128, ld: 1 } },
  });
  assert.match(hostLaneRefusal(spec, { ...fp8, down: { ...fp8.down, grid: { ...fp8.down.grid, sCols: 40 } } })!, /scale blocks are not a multiple of 16 values wide/);
  assert.match(hostLaneRefusal(spec, { ...fp8, interleaved: true })!, /block-FP8 gate and up rows are interleaved/);
  assert.match(hostLaneRefusal(spec, { ...row, gateUpBiasAt: 0 })!, /only one of its gate \| up and down products has biases/);
  assert.match(hostLaneRefusal({ ...spec, topK: 33 }, row)!, /it picks 33 experts a token \(a request carries 32 picks\)/);

  // gpt-oss's MXFP4 rows as the banks lay them out (the tiny gpt-oss checkpoint: H = I = 128): gate | up rows
  // interleaved (up unit j is row 2j + 1, H / 2 bytes after gate's), a scale byte a 32 values, biases, clamped SwiGLU.
  const dir = familyCheckpoint('gpt-oss-tiny-mxfp4');
  const { spec: g, tensors } = await loadModel(dir, { stream: true });
  const mx = expertRowLayout(tensors!, g);
  assert.equal(mx.format, 'mxfp4');
  assert.equal(hostLaneRefusal(g, mx), null);
  const G = g.hiddenSize, J = g.expertIntermediate;
  assert.deepEqual(laneRow(mx, g), {
    gate: mx.gateUpAt, up: mx.gateUpAt + G / 2, down: mx.downAt, step: 2,
    e8m0: { gate: mx.gateUpGridAt, up: mx.gateUpGridAt + G / 32, down: mx.downGridAt },
    bias: { gate: mx.gateUpBiasAt, up: mx.gateUpBiasAt + 2, down: mx.downBiasAt },
    clamp: { limit: g.expertAct!.limit, alpha: g.expertAct!.alpha },
  });
  assert.deepEqual([mx.downAt, mx.gateUpGridAt, mx.downGridAt, mx.gateUpBiasAt, mx.downBiasAt], [J * G, J * G + (G * J) / 2, J * G + (G * J) / 2 + (2 * J * G) / 32, J * G + (G * J) / 2 + (3 * J * G) / 32, J * G + (G * J) / 2 + (3 * J * G) / 32 + 4 * J]);
  assert.match(hostLaneRefusal({ ...g, hiddenSize: 80 }, mx)!, /hidden size 80 or expert size 128 is not a multiple of 32 \(a 16-byte load of mxfp4 values\)/);
  assert.match(hostLaneRefusal(g, { ...mx, down: { ...mx.down, grid: { ...mx.down.grid!, sLd: 8 } } })!, /MXFP4 scales are not one E8M0 byte a 32 values/);
});

