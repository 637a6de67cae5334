// A ring of periodic samples (cold share, swaps, tokens) behind the dashboard's time plots.
import type { ServerMetrics } from './metrics.ts';
import type { ResidencyView } from './types.ts';

export interface HistorySample {
  /** Unix time in milliseconds. */
  readonly t: number;
  readonly cold_share: number | null;
  readonly swaps_applied: number;
  readonly swaps_refused: number;
  /** Completion tokens per second since the previous sample. */
  readonly tokens_per_s: number;
  readonly step: number;
}

export class History {
  private readonly samples: HistorySample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastTokens = 0;
  private lastT = Date.now();

  constructor(
    private readonly metrics: ServerMetrics,
    private readonly residency: ResidencyView | undefined,
    private readonly capacity = 600,
  ) {}

  start(everySeconds: number): void {
    this.sample();
    this.timer = setInterval(() => this.sample(), everySeconds * 1000);
    this.timer.unref(); // never keeps the process alive on its own
  }

  stop(): void {
    clearInterval(this.timer);
  }

  sample(): HistorySample {
    const t = Date.now();
    const tokens = this.metrics.tokensGenerated();
    const dt = Math.max(1e-3, (t - this.lastT) / 1000);
    const snap = this.residency?.snapshot();
    const s: HistorySample = {
      t,
      cold_share: snap ? snap.cold_share.window ?? snap.cold_share.overall : null,
      swaps_applied: snap?.swaps.applied ?? 0,
      swaps_refused: snap?.swaps.refused ?? 0,
      tokens_per_s: this.samples.length === 0 ? 0 : (tokens - this.lastTokens) / dt,
      step: snap?.step ?? 0,
    };
    this.lastTokens = tokens;
    this.lastT = t;
    this.samples.push(s);
    if (this.samples.length > this.capacity) this.samples.shift();
    return s;
  }

  all(): readonly HistorySample[] {
    return this.samples;
  }
}
