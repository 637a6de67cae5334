// Where a backend writes a step's logits: into the caller's reused buffer when it passed one.
import { ResidencyError } from '../errors.ts';
import type { StepInput } from './backend.ts';

/** The array a step's logits go into: a view of the caller's `logitsInto` (checked for size), else a new one. */
export function logitsOut(input: StepInput, vocabSize: number): Float32Array {
  const n = input.chunks.length * vocabSize;
  const into = input.logitsInto;
  if (into === undefined) return new Float32Array(n);
  if (!(into instanceof Float32Array) || into.length < n) {
    throw new ResidencyError('BAD_ARGUMENT', `logitsInto: expected a Float32Array of at least ${input.chunks.length} x ${vocabSize} = ${n} floats, got ${into instanceof Float32Array ? into.length : typeof into}`);
  }
  return into.subarray(0, n);
}
