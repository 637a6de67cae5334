// The routing kernels against the CPU's routers: softmax over all experts then top-k (renormalized or not: Qwen3,
// Mixtral, OLMoE), top-k then softmax (gpt-oss, its bias already in the logits), DeepSeek-V3's group-limited sigmoid
// choice with its correction bias; each pick's bank slot from the slot table, the counter's increments (valid rows
// only, when the step counts), and the picks grouped by expert as groups.ts specifies (with the tensor-core tiles
// for a prefill). Prefill: op_route_rows then op_group; decode: op_route_group (one warp groups <= 32 picks, the block
// more). Ids must equal the CPU's but at a near tie of the scores they are chosen on (reported).
import { encodeGroups, encodeHostPost, encodeRoute, maxGroupedTiles, routeModeOf, type RouteMode } from '../../../src/backend/cuda/step/kernel-args.ts';
import { groupLaunch, routeGroupLaunch, routeRowsLaunch, type Launch } from '../../../src/backend/cuda/step/launches.ts';
import { routeTokens } from '../../../src/backend/cpu/moe-ops.ts';
import { groupLimitedTopk, topkSoftmax } from '../../../src/backend/cpu/routers.ts';
import type { OpDevice } from './device.ts';
import { DRY } from './device.ts';
import type { Draw } from './draw.ts';
import type { Family } from './shapes.ts';
import { FAMILIES } from './shapes.ts';
import { groupsOf } from './groups.ts';
import { BAR, normErr, record } from './report.ts';
import { uploadStep } from './step-rows.ts';

const MOE_LAYERS = 3, LAYER = 1;
const POISON = 0xffffffff;

/** The CPU's picks of T rows: ids and weights [T][K], and the scores each row's choice was made on [T][E]. */
function cpuRoute(f: Family, mode: RouteMode, logits: Float32Array, T: number, bias: Float32Array): { ids: Int32Array; w: Float32Array; score: Float32Array } {
  const { numExperts: E, topK: K } = f.spec;
  const ids = new Int32Array(T * K), w = new Float32Array(T * K), score = new Float32Array(T * E);
  if (mode === 'softmax' || mode === 'softmax_renorm') routeTokens(logits, score, ids, w, 0, T, E, K, mode === 'softmax_renorm');
  else if (mode === 'topk_softmax') {
    score.set(logits);
    for (let t = 0; t < T; t++) topkSoftmax(ids, t * K, w, t * K, logits, t * E, E, K);
  } else {
    const r = f.spec.router;
    if (r?.kind !== 'sigmoid_group') throw new Error(`${f.name}: no group router`);
    const groupScore = new Float32Array(r.nGroup);
    for (let t = 0; t < T; t++) {
      groupLimitedTopk(ids, t * K, w, t * K, score, logits, t * E, E, K, bias, { nGroup: r.nGroup, topkGroup: r.topkGroup, scalingFactor: r.scalingFactor, normalize: f.spec.normTopkProb }, groupScore);
    }
  }
  return { ids, w, score };
}

/** Whether row t's ids differ from the CPU's only where the scores they were chosen on tie to 1e-6. */
function nearTie(got: Int32Array, want: Int32Array, score: Float32Array, t: number, K: number, E: number): boolean {
  for (let k = 0; k < K; k++) {
    const a = got[k]!, b = want[t * K + k]!;
    if (a === b) continue;
    if (a < 0 || a >= E) return false;
    const sa = score[t * E + a]!, sb = score[t * E + b]!;
    if (!(Math.abs(sa - sb) <= 1e-6 * Math.max(1, Math.abs(sb)))) return false;
  }
  return true;
}

function runRouting(dev: OpDevice, draw: Draw, f: Family, decode: boolean, T: number, valid: number): void {
  const s = f.spec, mode = routeModeOf(s), { numExperts: E, topK: K } = s, LK = MOE_LAYERS * K;
  const tiles = maxGroupedTiles(T * K, E);
  try {
    const logits = draw.f32(T * E, 4);
    const bias = draw.f32(E, 0.1);
    const slots = Int32Array.from(draw.distinct(E, E + 2)); // physical slots: hot rows, spares, cold rows after
    const counter0 = Uint32Array.from({ length: E }, () => draw.int(1000));
    const step = uploadStep(dev, T, { valid, count: true });
    const pickE = dev.poisoned(4 * T * LK, 'pickE'), pickW = dev.poisoned(4 * T * LK, 'pickW'), pickSlot = dev.poisoned(4 * T * K, 'pickSlot');
    const counter = dev.guarded(counter0, 'counter');
    const g = {
      n: dev.poisoned(4, 'grpN'), slot: dev.poisoned(4 * E, 'grpSlot'), start: dev.poisoned(4 * (E + 1), 'grpStart'), rows: dev.poisoned(4 * T * K, 'grpRows'),
      tileN: dev.poisoned(4, 'tileN'), tileGroup: dev.poisoned(4 * tiles, 'tileGroup'), tileRow0: dev.poisoned(4 * tiles, 'tileRow0'),
    };
    const r = s.router;
    const route = encodeRoute({
      logits: dev.upload(logits, 'logits'), pickExpert: pickE, pickWeight: pickW, pickSlot, slots: dev.upload(slots, 'slots'), counter, header: step.dev,
      T, E, K, LK, layer: LAYER, mode,
      ...(r?.kind === 'sigmoid_group' ? { group: { choiceBias: dev.upload(bias, 'choice bias'), nGroup: r.nGroup, topkGroup: r.topkGroup, scaling: r.scalingFactor, renorm: s.normTopkProb } } : {}),
    });
    const groups = encodeGroups(g);
    const launches: Launch[] = decode ? [routeGroupLaunch(T, K, E, mode, route, groups, encodeHostPost(null))] : [routeRowsLaunch(T, E, mode, route), groupLaunch(E, route, groups)];
    for (const l of launches) dev.run(l);
    const want = cpuRoute(f, mode, logits, T, bias);
    const eAll = dev.readI32(pickE, T * LK), wAll = dev.readF32(pickW, T * LK), slotGot = dev.readI32(pickSlot, T * K);
    const problems: string[] = [];
    const ids = new Int32Array(T * K), got: number[] = [], ref: number[] = [];
    let ties = 0;
    for (let t = 0; t < T; t++) {
      const at = t * LK + LAYER * K;
      ids.set(eAll.subarray(at, at + K), t * K);
      const row = eAll.subarray(at, at + K);
      const same = row.every((e, k) => e === want.ids[t * K + k]);
      if (!same && !nearTie(row, want.ids, want.score, t, K, E)) problems.push(`row ${t}: experts ${[...row].join(',')}, the CPU ${[...want.ids.subarray(t * K, t * K + K)].join(',')}`);
      if (!same) { ties++; continue; }
      for (let k = 0; k < K; k++) {
        got.push(wAll[at + k]!);
        ref.push(want.w[t * K + k]!);
        if (slotGot[t * K + k] !== slots[row[k]!]) problems.push(`row ${t} pick ${k}: slot ${slotGot[t * K + k]}, the table's ${slots[row[k]!]}`);
      }
      // Other layers' picks are left as they were.
      const eU = new Uint32Array(eAll.buffer), wU = new Uint32Array(wAll.buffer);
      for (let j = t * LK; j < (t + 1) * LK; j++) if ((j < at || j >= at + K) && (eU[j] !== POISON || wU[j] !== POISON)) { problems.push(`row ${t}: another layer's picks written`); break; }
    }
    // The counter: one a pick of the valid rows (the device's picks).
    const cGot = new Uint32Array(dev.read(counter, 4 * E).buffer), cWant = Uint32Array.from(counter0);
    for (let p = 0; p < valid * K; p++) if (ids[p]! >= 0 && ids[p]! < E) cWant[ids[p]!]!++;
    const wrongCounts = cWant.reduce((n, c, e) => n + (c !== cGot[e] ? 1 : 0), 0);
    if (wrongCounts > 0 && !DRY) problems.push(`counter: ${wrongCounts} of ${E} experts' counts wrong`);
    if (!dev.guardIntact(counter, 4 * E)) problems.push('wrote past the counter');
    const rowsLabel = `${f.name} E${E} K${K} T${T} (${valid} valid, counted) ${mode}`;
    // Rows whose ids differ at a near tie are left out of the weights' error, and counted here.
    const tieNote = ties > 0 && !DRY ? ` (${ties} rows at a near tie)` : '';
    record(launches[0]!.name, rowsLabel + tieNote, 'f32', normErr(got, ref), BAR.f32, problems);
    // The groups of the valid rows' picks (the device's), as the spec groups them; within a group any order.
    const spec = groupsOf(ids, valid, K, (e) => slots[e]!);
    const n = dev.readI32(g.n, 1)[0]!, start = dev.readI32(g.start, spec.n + 1), gslot = dev.readI32(g.slot, spec.n), grows = dev.readI32(g.rows, valid * K);
    const gp: string[] = [];
    if (n !== spec.n) gp.push(`${n} groups, the spec ${spec.n}`);
    for (let i = 0; i < spec.n && gp.length < 4; i++) {
      if (start[i] !== spec.start[i] || start[i + 1] !== spec.start[i + 1]) { gp.push(`group ${i} (expert ${spec.expert[i]}): picks ${start[i]}..${start[i + 1]}, the spec ${spec.start[i]}..${spec.start[i + 1]}`); continue; }
      if (gslot[i] !== spec.slot[i]) gp.push(`group ${i}: slot ${gslot[i]}, the spec ${spec.slot[i]}`);
      const a = [...grows.subarray(start[i]!, start[i + 1]!)].sort((x, y) => x - y).join(), b = spec.rows.slice(spec.start[i]!, spec.start[i + 1]!).sort((x, y) => x - y).join();
      if (a !== b) gp.push(`group ${i}: picks ${a}, the spec ${b}`);
    }
    if (!decode) {
      const tn = dev.readI32(g.tileN, 1)[0]!, tg = dev.readI32(g.tileGroup, spec.tileGroup.length), t0 = dev.readI32(g.tileRow0, spec.tileRow0.length);
      if (tn !== spec.tileGroup.length || tg.join() !== spec.tileGroup.join() || t0.join() !== spec.tileRow0.join()) gp.push(`tiles ${tn}: ${tg.join()} / ${t0.join()}, the spec ${spec.tileGroup.join()} / ${spec.tileRow0.join()}`);
    }
    const groupKernel = decode ? `${launches[0]!.name}(groups)` : launches[1]!.name;
    record(groupKernel, `${rowsLabel} ${spec.n} groups${decode ? (valid * K > 32 ? ' (block grouping)' : ' (one warp)') : `, ${spec.tileGroup.length} tiles`}`, 'i32', gp.length ? 1 : 0, 0, gp);
  } finally {
    dev.release();
  }
}

export function routingCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, mixtral, olmoe, gptOss, deepseek, tiny } = FAMILIES;
  for (const f of [qwen3, mixtral, olmoe, gptOss, deepseek, tiny]) {
    dev.raise(f.spec, routeModeOf(f.spec));
    runRouting(dev, draw, f, false, 40, 40);
    for (const [T, valid] of [[1, 1], [4, 3], [8, 5], [16, 16]] as const) runRouting(dev, draw, f, true, T, valid);
  }
  // Groups of more than 64 picks: two tensor-core tiles each.
  runRouting(dev, draw, mixtral, false, 300, 300);
}
