// Swap churn through the residency Controller on any backend: thousands of hot<->cold row exchanges decided
// by the Controller from domain traffic (counts of the parity set's own routing, one domain after another)
// plus manual exchanges, greedy generation before, during and after, then the boot map restored through
// the Controller's restore_map plan. Backend-agnostic so it can be dry-run on the CPU; swaps.gpu.ts runs it
// on CUDA with the cold bank in mapped host memory.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../../src/backend/backend.ts';
import { createBackend, type BackendName } from '../../src/backend/registry.ts';
import { argmax } from '../../src/backend/argmax.ts';
import type { LoadedModel } from '../../src/model/load.ts';
import { Controller } from '../../src/residency/controller.ts';
import { identityRowMap, rowMapsEqual } from '../../src/residency/rowmap.ts';
import { restoreLowerBound } from '../../src/residency/restore.ts';
import { mulberry32 } from '../../src/util/rng.ts';
import { DirectSequences } from '../../src/backend/sequences.ts';

export interface ParityCase { domain: string; prompt_ids: number[]; prefill_routing: number[][][]; steps: { token: number; routing: number[][] }[] }

export function parityCases(dir: string): ParityCase[] {
  return (JSON.parse(readFileSync(join(dir, 'parity.json'), 'utf8')) as { cases: ParityCase[] }).cases;
}

/** Three parity prompts of different domains (code, German, Japanese). */
export const PICKED = [0, 7, 15] as const;

export interface ChurnResult {
  swapsByController: number;
  swapsManual: number;
  swapsRestore: number;
  restoreLowerBound: number;
  refused: number;
  drains: number;
  /** Hot experts (summed over layers) that were cold at boot, when the mid-way generation ran. */
  midwayMoved: number;
  digestBoot: string;
  digestMid: string;
  digestAfter: string;
  mapRestored: boolean;
  /** Tokens of the all-hot run that differ from parity.json's reference tokens. */
  allHotVsReference: number;
  /** Per stage (before, midway-static, during-swaps, after): tokens differing from the all-hot run. */
  mismatches: Record<string, number>;
  /** Rows whose holder differs between the banks and the Controller's map, checked mid-way and after. */
  mapDisagreements: number;
}

/** Greedy decode of `n` tokens; `between` runs between decode steps (swaps there are legal). */
function greedy(be: Backend, prompt: readonly number[], n: number, seq: number, between?: () => void): number[] {
  const V = be.spec.vocabSize;
  const seqs = new DirectSequences(be);
  seqs.open(seq, prompt.length + n + 1);
  try {
    let { logits } = seqs.forward({ chunks: [{ seq, tokens: prompt, startPos: 0 }], count: false });
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = argmax(logits, 0, V);
      out.push(t);
      if (i + 1 === n) break;
      between?.();
      ({ logits } = seqs.forward({ chunks: [{ seq, tokens: [t], startPos: prompt.length + i }], count: false }));
    }
    return out;
  } finally {
    seqs.close(seq);
  }
}

const diff = (a: readonly number[], b: readonly number[]) => a.reduce((n, t, i) => n + (t !== b[i] ? 1 : 0), 0) + Math.abs(a.length - b.length);

export async function runChurn(backend: BackendName, model: LoadedModel, cases: ParityCase[], opts: { hot?: number; target?: number; tokens?: number; log?: (s: string) => void } = {}): Promise<ChurnResult> {
  const log = opts.log ?? ((s: string) => console.log(s));
  const hot = opts.hot ?? 49;
  const target = opts.target ?? 2400;
  const N = opts.tokens ?? 40;
  const { numLayers: L, numExperts: E } = model.spec;
  const picked = PICKED.map((i) => cases[i]!);

  // Domain traffic: each domain's pick histogram from the reference routing (prefill and decode).
  const domains = [...new Set(cases.map((c) => c.domain))];
  const hist = new Map<string, Uint32Array>();
  for (const d of domains) {
    const h = new Uint32Array(L * E);
    for (const c of cases.filter((x) => x.domain === d)) {
      for (const rows of [...c.prefill_routing, ...c.steps.map((s) => s.routing)]) rows.forEach((ks, l) => ks.forEach((e) => { h[l * E + e]!++; }));
    }
    hist.set(d, h);
  }

  const allHot = await createBackend(backend, model);
  const ref = picked.map((c, i) => greedy(allHot, c.prompt_ids, N, i));
  allHot.dispose();
  const allHotVsReference = picked.reduce((n, c, i) => n + diff(ref[i]!, c.steps.slice(0, N).map((s) => s.token)), 0);

  const be = await createBackend(backend, model, { placement: { hotPerLayer: hot } });
  const boot = identityRowMap(model.spec.name, L, E, hot);
  const ctl = new Controller({
    boot, frozen: false,
    // A fast clock: drain every step, a 2-token half-life, and generous per-drain swaps, so every domain
    // change moves many rows. hysteresis 1 (any busier cold expert wins) keeps the churn high.
    budgets: { drain_every: 1, half_life_tokens: 2, hysteresis: 1, min_average: 0.5, move_cost_picks: 0, swaps_per_layer_per_drain: 12, swaps_per_step: 1000 },
  });
  const exchange = (s: { layer: number; hotRow: number; coldRow: number }) => be.banks.swapRows(s.layer, s.hotRow, s.coldRow);
  const snap = new Uint32Array(L * E);
  const rand = mulberry32(12345);
  let step = 0, round = 0, manual = 0;
  const agree = (): number => {
    let bad = 0;
    const m = ctl.map();
    for (let l = 0; l < L; l++) {
      m.layers_map[l]!.hot.forEach((e, r) => { if (be.banks.expertAt(l, 'hot', r) !== e) bad++; });
      m.layers_map[l]!.cold.forEach((e, r) => { if (be.banks.expertAt(l, 'cold', r) !== e) bad++; });
    }
    return bad;
  };
  const swapsSoFar = () => ctl.stats.applied + manual;
  /** One round: a domain's traffic for 3 steps (the Controller drains, decides, applies), sometimes manual exchanges. */
  const churnRound = () => {
    const h = hist.get(domains[round % domains.length]!)!;
    for (let k = 0; k < 3; k++) {
      for (let i = 0; i < snap.length; i++) snap[i] = (snap[i]! + h[i]!) >>> 0;
      ctl.tick({ step: step++, tokens: 1, counted: true }, () => snap, exchange);
    }
    if (round % 4 === 3) {
      // Manual exchanges of random rows (the map follows; queued swaps naming them go stale).
      for (let j = 0; j < 12; j++) {
        const l = Math.floor(rand() * L), hr = Math.floor(rand() * hot), cr = Math.floor(rand() * (E - hot));
        ctl.exchangeRows(l, hr, cr);
        be.banks.swapRows(l, hr, cr);
        manual++;
      }
    }
    round++;
  };

  const digestBoot = be.banks.digest();
  const mismatches: Record<string, number> = {};
  const stage = (name: string, between?: () => void) => {
    const got = picked.map((c, i) => greedy(be, c.prompt_ids, N, i, between));
    mismatches[name] = got.reduce((n, t, i) => n + diff(t, ref[i]!), 0);
    log(`# churn ${name}: ${swapsSoFar()} swaps so far, token mismatches vs all-hot ${mismatches[name]}`);
  };
  stage('before');
  while (swapsSoFar() < target / 2 && round < 20000) churnRound();
  let mapDisagreements = agree();
  const bootHot = new Set(Array.from({ length: hot }, (_, i) => i));
  const midwayMoved = ctl.map().layers_map.reduce((n, r) => n + r.hot.filter((e) => !bootHot.has(e)).length, 0);
  const digestMid = be.banks.digest();
  stage('midway');
  stage('during-swaps', churnRound); // a churn round between every decode step of every prompt
  while (swapsSoFar() < target && round < 40000) churnRound();
  mapDisagreements += agree();

  // Back to the boot map through the Controller: restore_map plans the minimal exchanges and queues them.
  const lower = restoreLowerBound(ctl.map(), boot);
  const appliedBefore = ctl.stats.applied;
  const r = ctl.control({ restore_map: true });
  if (!r.ok) throw new Error(`restore_map refused: ${r.error}`);
  while (ctl.queueDepth > 0) ctl.applySwaps(1000, exchange);
  const swapsRestore = ctl.stats.applied - appliedBefore;
  mapDisagreements += agree();
  const mapRestored = rowMapsEqual(ctl.map(), boot);
  const digestAfter = be.banks.digest();
  stage('after');
  be.dispose();
  return {
    swapsByController: appliedBefore, swapsManual: manual, swapsRestore, restoreLowerBound: lower, refused: ctl.stats.refused, drains: ctl.stats.drains,
    midwayMoved, digestBoot, digestMid, digestAfter, mapRestored, allHotVsReference, mismatches, mapDisagreements,
  };
}
