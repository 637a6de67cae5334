// One policy over the step stream, on the product's backend: each step is a real forward (the model's own
// router picks the experts), timed with the residency work that follows it (drain, decide, request and land
// moves), and scored for cold share against the banks' placement at that step.
import type { Backend, SequenceChunk } from '../../src/backend/backend.ts';
import { placeMap } from '../../src/backend/bank-map.ts';
import { ResidencyDriver } from '../../src/engine/residency-driver.ts';
import type { Budgets } from '../../src/residency/policy.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';
import type { ReplayResult } from '../../src/sim/replay.ts';
import type { Policy } from '../../src/sim/policies/policy.ts';
import { Walk, type Docs, type Phase } from './traffic.ts';
import { Follower } from '../../src/sim/follower.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

export type PolicyKind =
  | { readonly name: string; readonly kind: 'static'; readonly map?: RowMap }
  | { readonly name: string; readonly kind: 'adaptive'; readonly map: RowMap; readonly budgets?: Partial<Budgets> }
  /** A simulator policy (LRU copy on miss): its hot set is followed with background moves. */
  | { readonly name: string; readonly kind: 'follow'; readonly map: RowMap; readonly make: (boot: RowMap) => Policy }
  /** Hindsight: each phase's own top-H map, placed free (untimed) at the phase's first step. */
  | { readonly name: string; readonly kind: 'phase-maps'; readonly maps: readonly RowMap[] };

export interface PolicyRun extends ReplayResult {
  /** Wall time of each step: forward plus the residency work after it (ms). */
  readonly stepMs: Float64Array;
  /** 1 where moves were in flight during the step (copies beside its in-place reads). */
  readonly moving: Uint8Array;
  /** Cumulative pick counts of each phase [phase][layers * experts] (the truth the hindsight maps are fitted on). */
  readonly phaseCounts: Float64Array[];
  landed: number;
}

/** Sees every step's chunks and routing and its phase's index (the benchmark records the all-hot lane's as traces). */
export type StepSink = (chunks: readonly SequenceChunk[], routing: Int32Array, phase: number) => void;

export function runPolicy(be: Backend, p: PolicyKind, phases: readonly Phase[], docs: Docs, users: number, onStep?: StepSink): PolicyRun {
  const banks = be.banks;
  const { numExperts: E, topK: K } = be.spec;
  const L = banks.layers;
  const n = phases.reduce((a, ph) => a + ph.steps, 0);
  const r: PolicyRun = {
    policy: p.name, steps: n, layers: L, tokens: new Uint32Array(n), phase: new Uint16Array(n), picks: new Uint32Array(n),
    cold: new Uint32Array(n), coldPerLayer: new Uint32Array(n * L), hotTouched: new Uint16Array(n * L), coldTouched: new Uint16Array(n * L),
    coldTiles: new Uint16Array(n * L), swaps: new Uint32Array(n), copies: new Uint32Array(n), refused: new Uint32Array(n),
    stepMs: new Float64Array(n), moving: new Uint8Array(n), phaseCounts: phases.map(() => new Float64Array(L * E)), landed: 0,
  };
  const model = be.spec.name;
  if (p.kind !== 'phase-maps' && p.map) placeMap(banks, model, p.map);
  const driver = p.kind === 'adaptive'
    ? new ResidencyDriver({ backend: be, frozen: false, ...(p.budgets ? { budgets: p.budgets } : {}), log: () => {} })
    : null;
  const sim = p.kind === 'follow' ? p.make(p.map) : null;
  const follower = sim ? new Follower(be.banks) : null;
  const walk = new Walk(docs, users);
  const seqs = new DirectSequences(be);
  let step = 0;
  for (let ph = 0; ph < phases.length; ph++) {
    if (p.kind === 'phase-maps') placeMap(banks, model, p.maps[ph]!);
    for (let s = 0; s < phases[ph]!.steps; s++, step++) {
      const { chunks, close, open } = walk.next(ph, phases[ph]!);
      for (const q of close) seqs.close(q);
      for (const o of open) seqs.open(o.seq, o.capacity);
      const count = driver ? driver.countStep(chunks.length) : false;
      const moving = banks.moving > 0;
      const t0 = performance.now();
      const out = seqs.forward({ chunks, count, recordRouting: true });
      const forwardMs = performance.now() - t0;
      // Cold share against the placement this step ran with (before the residency work after it lands or starts moves).
      const routing = out.routing!;
      onStep?.(chunks, routing, ph);
      r.tokens[step] = chunks.length;
      r.phase[step] = ph;
      r.picks[step] = chunks.length * L * K;
      const pc = r.phaseCounts[ph]!;
      let cold = 0;
      for (let t = 0; t < chunks.length; t++) {
        for (let l = 0; l < L; l++) {
          for (let k = 0; k < K; k++) {
            const e = routing[(t * L + l) * K + k]!;
            pc[l * E + e]!++;
            if (banks.slotOf(l, e) >= banks.hotPerLayer) { cold++; r.coldPerLayer[step * L + l]!++; }
          }
        }
      }
      r.cold[step] = cold;
      const t2 = performance.now(); // the scoring above is the benchmark's, not the step's
      let landed = 0;
      if (driver) {
        const before = driver.controller.stats.applied;
        driver.afterStep({ step, tokens: chunks.length, counted: count, durationNs: Math.round(forwardMs * 1e6) });
        landed = driver.controller.stats.applied - before;
      } else if (sim && follower) {
        sim.afterStep({ index: step, phase: ph, tokens: chunks.length, counted: true, picks: Uint16Array.from(out.routing!) });
        landed = follower.follow(sim.hot);
      }
      r.stepMs[step] = forwardMs + (performance.now() - t2);
      r.moving[step] = moving ? 1 : 0;
      r.swaps[step] = landed;
      r.landed += landed;
    }
  }
  for (const q of walk.openSeqs()) seqs.close(q);
  // Let every move land, so the next policy starts from a quiet bank.
  while (banks.moving > 0) {
    const landed = banks.takeLanded();
    if (driver) for (const x of landed) driver.controller.land(x.layer, x.hotRow, x.coldRow);
  }
  return r;
}
