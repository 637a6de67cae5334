// The seed prior from a counts dump: checked against the model it will steer, flattened for the Controller.
import { ResidencyError } from '../errors.ts';
import type { CountsDump } from './counts.ts';

/** What a prior must fit: the served model's name(s) and its geometry. */
export interface PriorTarget {
  /**
   * Names the dump's model may carry: the checkpoint's, and the boot map's when it names another. Absent:
   * any name (the simulator's traces carry none; the geometry is still checked).
   */
  readonly models?: readonly string[];
  readonly layers: number;
  readonly experts: number;
}

/**
 * The dump's cumulative table, flattened [layer * experts + expert] (ControllerOptions.prior), after checking
 * it was taken on this model and geometry: a prior from another model would steer the wrong experts, so it is
 * refused before anything is served. `source` names the flag or file in the error (e.g. "--prior dump.json").
 */
export function priorFromDump(dump: CountsDump, target: PriorTarget, source = 'prior'): Float64Array {
  const layers = dump.cumulative.length;
  const experts = dump.cumulative[0]?.length ?? 0;
  if (layers !== target.layers || experts !== target.experts) {
    throw new ResidencyError('BAD_COUNTS',
      `${source}: the dump is ${layers} layers x ${experts} experts but ${target.models?.[0] !== undefined ? `the model ${target.models[0]} has` : 'the traces have'} ${target.layers} x ${target.experts}: a prior must come from the same model`);
  }
  if (target.models !== undefined && !target.models.includes(dump.model)) {
    throw new ResidencyError('BAD_COUNTS',
      `${source}: the dump is of model '${dump.model}', expected ${target.models.map((m) => `'${m}'`).join(' or ')}: a prior must come from the same model`);
  }
  const flat = new Float64Array(layers * experts);
  dump.cumulative.forEach((row, l) => flat.set(row, l * experts));
  return flat;
}
