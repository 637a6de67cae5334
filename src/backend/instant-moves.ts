// Background moves for banks whose copies are instant (host memory): made at once, reported at the next take.
import { ResidencyError } from '../errors.ts';
import type { ExpertBanks, RowExchange } from './backend.ts';

/**
 * For banks whose swaps are instant (memory the host writes directly): a requested exchange is made at once
 * and reported by the next takeLanded.
 */
export class InstantMoves {
  private landed: RowExchange[] = [];
  private readonly busy = new Set<string>();

  constructor(private readonly banks: Pick<ExpertBanks, 'swapRows' | 'expertAt'>) {}

  request(layer: number, hotRow: number, coldRow: number): void {
    const hot = this.banks.expertAt(layer, 'hot', hotRow);
    const cold = this.banks.expertAt(layer, 'cold', coldRow);
    for (const e of [hot, cold]) {
      if (this.busy.has(`${layer}/${e}`)) throw new ResidencyError('BAD_ARGUMENT', `requestSwap: layer ${layer} expert ${e} is already moving`);
    }
    this.banks.swapRows(layer, hotRow, coldRow);
    this.busy.add(`${layer}/${hot}`).add(`${layer}/${cold}`);
    this.landed.push({ layer, hotRow, coldRow });
  }

  take(): RowExchange[] {
    const out = this.landed;
    this.landed = [];
    this.busy.clear();
    return out;
  }

  get moving(): number {
    return this.landed.length;
  }

  readonly startable = Infinity;
}

