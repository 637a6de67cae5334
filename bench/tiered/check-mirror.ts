// Device self check of mirror moves (--smoke --moves mirror; check.ts checks exchanges): while moves are in
// flight and after they land, every expert read through the slot table gives bit-identical output to its
// output before any move. The benchmark fills hot rows with random values (only where bytes are read matters
// for time); this check first copies each boot-hot expert's mirror row into its hot row so that outputs
// are comparable.
import { churnWant, probeAll, sameOutputs } from './check.ts';
import type { CudaTieredExecutor } from './cuda-executor.ts';
import { movesInFlight } from './geometry.ts';
import { MirrorRowTable } from './mirror-rows.ts';
import { newPlan } from './plan.ts';
import type { RowCopy } from './rows.ts';
import { mulberry32 } from '../../src/sim/rng.ts';

export function checkMirrorMoves(ex: CudaTieredExecutor, log: (s: string) => void): void {
  const g = ex.geometry;
  const boot = new Uint8Array(g.layers * g.experts);
  for (let l = 0; l < g.layers; l++) for (let e = 0; e < g.hotPerLayer; e++) boot[l * g.experts + e] = 1;
  const table = new MirrorRowTable(g.layers, g.experts, g.hotPerLayer, movesInFlight(g), boot);
  const fill: RowCopy[] = [];
  for (let l = 0; l < g.layers; l++) for (let e = 0; e < g.hotPerLayer; e++) fill.push({ layer: l, src: table.mirror(e), dst: table.slot[l * g.experts + e]! });
  ex.copy(fill);
  ex.drainCopies();
  const mirrorSlots = new Int32Array(g.layers * g.experts);
  for (let l = 0; l < g.layers; l++) for (let e = 0; e < g.experts; e++) mirrorSlots[l * g.experts + e] = table.mirror(e);
  // Reference: every expert read from its mirror row.
  const same = sameOutputs(ex, table.slot, probeAll(ex, mirrorSlots));
  same('boot (hot rows = mirror copies)');
  const rand = mulberry32(3);
  const want = boot.slice();
  const plan = newPlan(g, 1);
  let moves = 0;
  for (let round = 0; round < 12; round++) {
    churnWant(want, rand, g.layers, g.experts);
    moves += table.beforeStep(want, ex).started;
    ex.step(table.slot, plan, null);
    same(`round ${round} (${table.inFlight} moves in flight)`);
  }
  for (let i = 0; i < 50 && (table.inFlight > 0 || table.homeHotMask().some((v, j) => v !== want[j])); i++) {
    ex.drainCopies();
    table.beforeStep(want, ex);
    ex.step(table.slot, plan, null);
  }
  if (table.inFlight > 0) throw new Error('tiered check: mirror moves did not land');
  table.check();
  same('after all mirror moves');
  const home = table.homeHotMask();
  for (let i = 0; i < want.length; i++) if (home[i] !== want[i]) throw new Error(`tiered check: expert ${i} not where the policy wanted it`);
  log(`check: ${moves} mirror moves (one host->device copy each); every expert's output bit-identical throughout`);
}
