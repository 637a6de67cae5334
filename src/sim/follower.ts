// A copy-on-miss policy's hot set followed with background moves, as the CUDA banks make them: what bench:tiered runs
// LRU with on the device, and what the simulator runs it with under --copies-in-flight (policies/followed.ts).
import type { ExpertBanks } from '../backend/backend.ts';
import { MovesInFlight } from '../backend/moves-in-flight.ts';

/**
 * Moves the banks toward a simulator policy's hot set with background moves: per layer, experts it wants
 * hot that are cold are paired with experts it wants cold that are hot, skipping any already moving.
 */
export class Follower {
  private readonly moves: MovesInFlight;
  /** Where the next step's requests start: the layer after the last one that got a request (so every layer gets its turn). */
  private firstLayer = 0;

  constructor(private readonly banks: ExpertBanks, private readonly maxRequestsPerStep = 8) {
    this.moves = new MovesInFlight(banks);
  }

  /** Requests moves toward `hot` ([layers * experts]); returns the moves that landed since the last call. */
  follow(hot: Uint8Array): number {
    const banks = this.banks;
    const E = banks.experts;
    const H = banks.hotPerLayer;
    const landed = this.moves.settle().length;
    let requests = 0;
    // No more than the banks start now (as the residency driver): the rest are chosen again next step, toward the
    // policy's hot set as it is then, rather than queued in the banks behind copies already running.
    const room = (): boolean => requests < this.maxRequestsPerStep && banks.startable > 0;
    const L = banks.layers;
    for (let n = 0, l = this.firstLayer; n < L && room(); n++, l = (l + 1) % L) {
      const enter: number[] = [];
      const leave: number[] = [];
      for (let e = 0; e < E; e++) {
        const slot = banks.slotOf(l, e);
        const wanted = hot[l * E + e] === 1;
        if (wanted === slot < H) continue; // where the policy wants it
        if (slot < H ? this.moves.busy(l, slot, -1) : this.moves.busy(l, -1, slot - H)) continue; // its row is moving
        (wanted ? enter : leave).push(e);
      }
      for (let i = 0; i < Math.min(enter.length, leave.length) && room(); i++) {
        this.moves.request({ layer: l, hotRow: banks.slotOf(l, leave[i]!), coldRow: banks.slotOf(l, enter[i]!) - H });
        requests++;
        this.firstLayer = (l + 1) % L;
      }
    }
    return landed;
  }
}
