// Whether the cores are shared with other work right now, from this process's involuntary context switches (the
// kernel preempting one of its threads for another runnable one). Idle workers poll for jobs only while they are not
// (layout.ts POLL): polling keeps a core busy that a descheduled thread of ours or another process needs.
// Measured on the 2-core VM, tiny-moe batch-1 decode on 2 threads: ~120-150 involuntary switches a second alone,
// ~1,500-5,000 with one core busy (a shell loop), where polling workers ran 1,029 tok/s and workers that sleep at once
// 1,571 (alone 2,237 and 2,323: polling gains there in A/B, 1.04-1.06x).

/** How often the rate is taken (ms of wall clock); a window includes idle time, which lowers the rate. */
const WINDOW_MS = 50;
/** Involuntary switches a second above which the cores count as shared. */
const SHARED_PER_S = 300;

export class Contention {
  private since = performance.now();
  private switches = process.resourceUsage().involuntaryContextSwitches;
  private shared = false;

  /** Whether the cores were shared over the last window (read at most every WINDOW_MS; cheap otherwise). */
  check(): boolean {
    const now = performance.now();
    if (now - this.since < WINDOW_MS) return this.shared;
    const n = process.resourceUsage().involuntaryContextSwitches;
    this.shared = ((n - this.switches) * 1000) / (now - this.since) > SHARED_PER_S;
    this.since = now;
    this.switches = n;
    return this.shared;
  }
}
