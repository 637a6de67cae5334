// Device self checks of the tiered benchmark (run by --smoke on a small geometry):
// 1. the expert kernels against a float64 CPU reference, reading a hot row, a cold row (host memory in
//    place) and a staging row;
// 2. the row exchanges of rows.ts: while exchanges are in flight and after they finish, every expert read
//    through the slot table gives bit-identical output to its output before any move.
import type { CudaTieredExecutor } from './cuda-executor.ts';
import { RowTable } from './rows.ts';
import { newPlan } from './plan.ts';
import { mulberry32 } from '../../src/sim/rng.ts';

function bf16(u: number): number {
  const b = new Float32Array(new Uint32Array([u << 16]).buffer);
  return b[0]!;
}

/** float64 SwiGLU of one row (W_gate [I][D], W_up [I][D], W_down [D][I]) on x. */
export function referenceFfn(row: Uint16Array, x: ArrayLike<number>, D: number, I: number): Float64Array {
  const a = new Float64Array(I);
  for (let j = 0; j < I; j++) {
    let g = 0; let u = 0;
    for (let k = 0; k < D; k++) { g += bf16(row[j * D + k]!) * x[k]!; u += bf16(row[(I + j) * D + k]!) * x[k]!; }
    a[j] = (g / (1 + Math.exp(-g))) * u;
  }
  const y = new Float64Array(D);
  for (let i = 0; i < D; i++) {
    let s = 0;
    for (let j = 0; j < I; j++) s += bf16(row[2 * I * D + i * I + j]!) * a[j]!;
    y[i] = s;
  }
  return y;
}

function relErr(got: ArrayLike<number>, ref: ArrayLike<number>): number {
  let num = 0; let den = 0;
  for (let i = 0; i < ref.length; i++) {
    if (!Number.isFinite(got[i]!)) return Infinity;
    num += (got[i]! - ref[i]!) ** 2; den += ref[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

export function checkKernels(ex: CudaTieredExecutor, log: (s: string) => void): void {
  const g = ex.geometry;
  const layer = g.layers - 1;
  const slots = new Int32Array(g.layers * g.experts);
  // expert 5 -> hot row 7, expert 9 -> cold row 3, expert 11 -> staging row 1.
  const cases = [[5, 7], [9, g.hotPerLayer + 3], [11, g.experts + 1]] as const;
  for (const [e, s] of cases) slots[layer * g.experts + e] = s;
  const y = ex.probe(slots, layer, cases.map(([e]) => e));
  const x = ex.readX();
  for (const [j, [e, s]] of cases.entries()) {
    const ref = referenceFfn(ex.readRow(layer, s), x, g.hidden, g.intermediate);
    const err = relErr(y.subarray(j * g.hidden, (j + 1) * g.hidden), ref);
    const where = s < g.hotPerLayer ? 'hot' : s < g.experts ? 'cold (host, in place)' : 'staging';
    log(`check: expert ${e} from ${where} row: rel err vs float64 ${err.toExponential(2)}`);
    if (!(err < 1e-4)) throw new Error(`tiered check: expert FFN from a ${where} row is off (rel err ${err})`);
  }
}

/** Every expert's output, per layer, with the experts read through `slots`. */
export function probeAll(ex: CudaTieredExecutor, slots: Int32Array): Float32Array[] {
  const all = Array.from({ length: ex.geometry.experts }, (_, e) => e);
  return Array.from({ length: ex.geometry.layers }, (_, l) => ex.probe(slots, l, all));
}

/** A check that throws unless every expert read through `slots` (as they are now) gives bit-identical output to `before`. */
export function sameOutputs(ex: CudaTieredExecutor, slots: Int32Array, before: readonly Float32Array[]): (when: string) => void {
  const g = ex.geometry;
  const all = Array.from({ length: g.experts }, (_, e) => e);
  return (when) => {
    for (let l = 0; l < g.layers; l++) {
      const now = ex.probe(slots, l, all);
      for (let i = 0; i < now.length; i++) {
        if (!Object.is(now[i], before[l]![i])) {
          throw new Error(`tiered check: ${when}: layer ${l} expert ${Math.floor(i / g.hidden)} output changed (${before[l]![i]} -> ${now[i]})`);
        }
      }
    }
  };
}

/** Moves a few experts per layer in `want`: 3 random tries per layer to swap a wanted-hot one for a wanted-cold one. */
export function churnWant(want: Uint8Array, rand: () => number, layers: number, experts: number): void {
  for (let l = 0; l < layers; l++) {
    for (let k = 0; k < 3; k++) {
      const a = l * experts + Math.floor(rand() * experts);
      const b = l * experts + Math.floor(rand() * experts);
      if (want[a] && !want[b]) { want[a] = 0; want[b] = 1; }
    }
  }
}

export function checkExchanges(ex: CudaTieredExecutor, log: (s: string) => void): void {
  const g = ex.geometry;
  const boot = new Uint8Array(g.layers * g.experts);
  for (let l = 0; l < g.layers; l++) for (let e = 0; e < g.hotPerLayer; e++) boot[l * g.experts + e] = 1;
  const table = new RowTable(g.layers, g.experts, g.hotPerLayer, g.stagingRows, boot);
  const same = sameOutputs(ex, table.slot, probeAll(ex, table.slot));
  const rand = mulberry32(3);
  const want = boot.slice();
  const plan = newPlan(g, 1);
  let exchanges = 0;
  for (let round = 0; round < 12; round++) {
    churnWant(want, rand, g.layers, g.experts);
    const m = table.beforeStep(want, ex);
    exchanges += m.started;
    ex.step(table.slot, plan, null);
    same(`round ${round} (${table.inFlight} exchanges in flight)`);
  }
  for (let i = 0; i < 50 && table.inFlight > 0; i++) {
    ex.drainCopies();
    table.beforeStep(table.homeHotMask(), ex);
    ex.step(table.slot, plan, null);
  }
  if (table.inFlight > 0) throw new Error('tiered check: exchanges did not finish');
  table.check();
  same('after all exchanges');
  let moved = 0;
  for (let i = 0; i < want.length; i++) if (want[i] !== boot[i]) moved++;
  const home = table.homeHotMask();
  for (let i = 0; i < want.length; i++) if (home[i] !== want[i]) throw new Error(`tiered check: expert ${i} not where the policy wanted it`);
  log(`check: ${exchanges} exchanges through staging rows (${moved / 2} experts moved in); every expert's output bit-identical throughout`);
}
