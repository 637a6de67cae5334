// One line a case (`# op <kernel> <shape> <dtype>: normalized error X (bar Y)`), and the bars. The normalized error
// is ||got - ref|| / ||ref|| over the outputs compared (ggml's test-backend-ops takes the square of it, NMSE): an
// unwritten (poisoned) or non-finite output makes it infinite. Weights are exact on both sides (drawn as stored and
// read by the CPU's own readers), so a bar covers only the order of float32 sums against the CPU's float64 ones.
import { DRY } from './device.ts';

/**
 * Bars by how the kernel sums. gemv and the f32 ops (norms, RoPE, attention, routing weights, latent attention):
 * float32 sums in another order than the CPU's float64 ones, 1e-5 (a wrong index or scale gives ~1). Tensor-core
 * tiles: each fp32 activation goes in as two bf16 parts (~16 bits kept), 1e-4.
 */
export const BAR = { gemv: 1e-5, tc: 1e-4, f32: 1e-5 } as const;

export interface OpCase {
  readonly kernel: string;
  readonly shape: string;
  readonly dtype: string;
  readonly err: number;
  readonly bar: number;
  /** What else the case checked that failed (an output written past its end, ids that differ...). */
  readonly problems: string[];
}

export const cases: OpCase[] = [];

/** ||got - ref|| / ||ref|| (Infinity when a value is not finite). */
export function normErr(got: ArrayLike<number>, ref: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!;
    if (!Number.isFinite(g)) return Infinity;
    num += (g - ref[i]!) ** 2;
    den += ref[i]! ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

/** Indices of `a` (from, to) that are not finite: outputs left poisoned or computed as NaN. */
export function nonFinite(a: Float32Array, from = 0, to = a.length): number {
  let n = 0;
  for (let i = from; i < to; i++) if (!Number.isFinite(a[i]!)) n++;
  return n;
}

/** Records and prints a case (not compared on a dry run). */
export function record(kernel: string, shape: string, dtype: string, err: number, bar: number, problems: string[] = []): void {
  const c: OpCase = { kernel, shape, dtype, err, bar, problems: DRY ? [] : problems };
  cases.push(c);
  const e = DRY ? 'dry' : Number.isFinite(err) ? err.toExponential(2) : String(err);
  console.log(`# op ${kernel} ${shape} ${dtype}: normalized error ${e} (bar ${bar === 0 ? '0' : bar.toExponential(0)})${c.problems.length ? ` FAILED: ${c.problems.join('; ')}` : ''}`);
}

/** The cases of a group that failed (over their bar, or another check), as lines for an assertion. */
export function failures(from: number): string[] {
  if (DRY) return [];
  return cases.slice(from).filter((c) => !(c.err <= c.bar) || c.problems.length > 0).map((c) => `${c.kernel} ${c.shape} ${c.dtype}: ${c.err} (bar ${c.bar}) ${c.problems.join('; ')}`);
}
