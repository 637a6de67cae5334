// Runs chunks of the current job on whichever thread claims them: the same kernels as the serial
// compute, so a row's result never depends on which thread computed it.
import { linearRows } from '../linalg.ts';
import { computeExpertUnits } from '../expert-units.ts';
import { ARGS, BOUNDS, CHUNKS, CLAIM, OP, OP_EXPERTS, OP_LINEAR } from './layout.ts';
import { ResidencyError } from '../../../errors.ts';

export type Table = (Float32Array | Int32Array | undefined)[];

/** Thread-local scratch: the SwiGLU activation buffer (2*I floats), grown on demand. */
export interface JobScratch {
  act: Float32Array;
}

function f32(t: Table, id: number): Float32Array {
  const a = t[id];
  if (!(a instanceof Float32Array)) throw new ResidencyError('INTERNAL', `cpu threads: array ${id} is not a registered Float32Array`);
  return a;
}

function i32(t: Table, id: number): Int32Array {
  const a = t[id];
  if (!(a instanceof Int32Array)) throw new ResidencyError('INTERNAL', `cpu threads: array ${id} is not a registered Int32Array`);
  return a;
}

/** Claims and runs chunks of the job in the control block until none are left; returns how many it ran. */
export function claimChunks(ctl: Int32Array, table: Table, banks: readonly Float32Array[], s: JobScratch): number {
  const op = ctl[OP]!;
  const n = ctl[CHUNKS]!;
  const a = ARGS;
  let ran = 0;
  for (let c = Atomics.add(ctl, CLAIM, 1); c < n; c = Atomics.add(ctl, CLAIM, 1)) {
    const lo = ctl[BOUNDS + c]!;
    const hi = ctl[BOUNDS + c + 1]!;
    if (op === OP_LINEAR) {
      linearRows(f32(table, ctl[a]!), f32(table, ctl[a + 1]!), ctl[a + 2]!, f32(table, ctl[a + 3]!), ctl[a + 4]!, ctl[a + 5]!, ctl[a + 6]!, lo, hi);
    } else if (op === OP_EXPERTS) {
      const inter = ctl[a + 4]!;
      if (s.act.length < 2 * inter) s.act = new Float32Array(2 * inter);
      computeExpertUnits(f32(table, ctl[a]!), i32(table, ctl[a + 1]!), lo, hi, banks, f32(table, ctl[a + 2]!), ctl[a + 3]!, inter, s.act);
    } else {
      throw new ResidencyError('INTERNAL', `cpu threads: unknown op ${op}`);
    }
    ran++;
  }
  return ran;
}
