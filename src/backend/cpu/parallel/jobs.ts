// Runs one job's share (its row range) on whichever thread holds it: the same kernels as the serial
// compute, so a row's result never depends on which thread computed it.
import { linearRows } from '../linalg.ts';
import { computeExpertUnits } from '../expert-units.ts';
import { OP_EXPERTS, OP_LINEAR } from './layout.ts';
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

/** Runs op with the arguments at a[at..]. */
export function runJob(op: number, a: Int32Array, at: number, table: Table, banks: readonly Float32Array[], s: JobScratch): void {
  if (op === OP_LINEAR) {
    linearRows(f32(table, a[at]!), f32(table, a[at + 1]!), a[at + 2]!, f32(table, a[at + 3]!), a[at + 4]!, a[at + 5]!, a[at + 6]!, a[at + 7]!, a[at + 8]!);
  } else if (op === OP_EXPERTS) {
    const inter = a[at + 4]!;
    if (s.act.length < 2 * inter) s.act = new Float32Array(2 * inter);
    computeExpertUnits(f32(table, a[at]!), i32(table, a[at + 1]!), a[at + 5]!, a[at + 6]!, banks, f32(table, a[at + 2]!), a[at + 3]!, inter, s.act);
  } else {
    throw new ResidencyError('INTERNAL', `cpu threads: unknown op ${op}`);
  }
}
