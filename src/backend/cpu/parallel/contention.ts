// Whether the cores are shared with other work right now, from this process's involuntary context switches (the
// kernel preempting one of its threads for another runnable one). Idle workers poll for jobs only while they are not
// (layout.ts POLL): polling keeps a core busy that a descheduled thread of ours or another process needs. A shared
// machine shows several times the switches of a quiet one; the threshold and the A/B: docs/results.md, "CPU threads".

/** How often the rate is taken (ms of wall clock); a window includes idle time, which lowers the rate. */
const WINDOW_MS = 50;
/** Involuntary switches a second above which the cores count as shared. */
const SHARED_PER_S = 300;

export class Contention {
  private since: number;
  private switches: number;
  private shared = false;

  /** `clock` (ms) and `switches` (this process's involuntary context switches so far): tests give their own. */
  constructor(
    private readonly clock: () => number = () => performance.now(),
    private readonly count: () => number = () => process.resourceUsage().involuntaryContextSwitches,
  ) {
    this.since = clock();
    this.switches = count();
  }

  /** Whether the cores were shared over the last window (read at most every WINDOW_MS; cheap otherwise). */
  check(): boolean {
    const now = this.clock();
    if (now - this.since < WINDOW_MS) return this.shared;
    const n = this.count();
    this.shared = ((n - this.switches) * 1000) / (now - this.since) > SHARED_PER_S;
    this.since = now;
    this.switches = n;
    return this.shared;
  }
}
