// Wall time per CPU op, for benchmarks (bench:cpu --ops): a RowCompute that times each op of the one it wraps.
// Linear layers are keyed by their shape and rows ("linear 8192x128 r1"), the bf16 ones likewise; an op another
// op calls (route's and qkv's linear on one thread) counts in its caller only. Never changes a result.
import type { RowCompute } from './row-compute.ts';

/** Milliseconds and calls per op key, summed since the timer was made or reset. */
export class OpTimer {
  readonly ms = new Map<string, number>();
  readonly calls = new Map<string, number>();
  /** Set false to stop counting (e.g. during warm-up); the ops still run. */
  on = true;

  add(key: string, ms: number): void {
    this.ms.set(key, (this.ms.get(key) ?? 0) + ms);
    this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
  }

  reset(): void {
    this.ms.clear();
    this.calls.clear();
  }
}

const TIMED = ['linear', 'linearBf16', 'route', 'qkv', 'addNorm', 'experts', 'quantExperts', 'combine', 'attention'] as const;

function keyOf(op: (typeof TIMED)[number], args: unknown[]): string {
  if (op === 'linear') return `linear ${args[5]}x${args[6]} r${args[4]}`;
  if (op === 'linearBf16') {
    const w = args[1] as { rows: number; cols: number };
    return `linear bf16 ${w.rows}x${w.cols} r${args[3]}`;
  }
  return op;
}

/**
 * `inner` with each op timed into `timer`; the rest forwarded as they are. The ops are bound to `inner`, so an op
 * one of them calls (route's linear) runs unwrapped and counts in its caller.
 */
export function timedCompute(inner: RowCompute, timer: OpTimer): RowCompute {
  const time = <A extends unknown[]>(op: (typeof TIMED)[number], f: (...a: A) => void) => (...args: A): void => {
    if (!timer.on) return f(...args);
    const t0 = performance.now();
    try {
      f(...args);
    } finally {
      timer.add(keyOf(op, args), performance.now() - t0);
    }
  };
  return {
    linear: time('linear', inner.linear.bind(inner)),
    linearBf16: time('linearBf16', inner.linearBf16.bind(inner)),
    route: time('route', inner.route.bind(inner)),
    qkv: time('qkv', inner.qkv.bind(inner)),
    addNorm: time('addNorm', inner.addNorm.bind(inner)),
    experts: time('experts', inner.experts.bind(inner)),
    quantExperts: time('quantExperts', inner.quantExperts.bind(inner)),
    combine: time('combine', inner.combine.bind(inner)),
    attention: time('attention', inner.attention.bind(inner)),
    beginStep: () => inner.beginStep(),
    endStep: () => inner.endStep(),
    forget: (a) => inner.forget(a),
    ready: () => inner.ready(),
    workerChunks: () => inner.workerChunks(),
    dispose: () => inner.dispose(),
  };
}
