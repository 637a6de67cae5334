// Test helper: an in-memory backend for the residency driver (rows hold bytes derived from the expert id).
import { createHash } from 'node:crypto';
import { type Backend, type ExpertBanks, type RowExchange } from '../backend/backend.ts';
import { InstantMoves } from '../backend/instant-moves.ts';
import type { ModelSpec } from '../model/spec.ts';
import { Counter } from '../residency/counts.ts';

export const FAKE_GEOMETRY = Object.freeze({ L: 3, E: 16, H: 12, K: 2 });
const { L, E, H, K } = FAKE_GEOMETRY;

/** Banks whose rows hold bytes derived from the expert id, so a lost or duplicated row shows in the digest. */
export class FakeBanks implements ExpertBanks {
  readonly layers = L;
  readonly experts = E;
  readonly hotPerLayer = H;
  readonly rows: Uint8Array[][] = []; // [layer][slot] row bytes
  readonly holder: number[][] = [];
  swaps = 0;
  private readonly instant = new InstantMoves(this);
  constructor() {
    for (let l = 0; l < L; l++) {
      this.rows.push(Array.from({ length: E }, (_, e) => Uint8Array.from({ length: 8 }, (_, i) => (e * 31 + l * 7 + i) & 255)));
      this.holder.push(Array.from({ length: E }, (_, e) => e));
    }
  }
  slotOf(layer: number, expert: number): number { return this.holder[layer]!.indexOf(expert); }
  expertAt(layer: number, bank: 'hot' | 'cold', row: number): number { return this.holder[layer]![bank === 'hot' ? row : H + row]!; }
  swapRows(layer: number, hotRow: number, coldRow: number): void {
    const r = this.rows[layer]!;
    const h = this.holder[layer]!;
    [r[hotRow], r[H + coldRow]] = [r[H + coldRow]!, r[hotRow]!];
    [h[hotRow], h[H + coldRow]] = [h[H + coldRow]!, h[hotRow]!];
    this.swaps++;
  }
  requestSwap(layer: number, hotRow: number, coldRow: number): void { this.instant.request(layer, hotRow, coldRow); }
  takeLanded(): RowExchange[] { return this.instant.take(); }
  get moving(): number { return this.instant.moving; }
  get startable(): number { return this.instant.startable; }
  digest(): string {
    const hash = createHash('sha256');
    for (const layer of this.rows) for (const row of layer) hash.update(row);
    return hash.digest('hex');
  }
}

export function fakeBackend(): Backend & { counter: Counter; banks: FakeBanks } {
  const counter = new Counter(L, E, K);
  const banks = new FakeBanks();
  return {
    name: 'fake', spec: { name: 'fake-moe', numLayers: L, numExperts: E, topK: K } as ModelSpec, banks, counter,
    kvCache: { blockSize: 16, numBlocks: 1024, dtype: 'float32', bytesPerBlock: 0 }, copyBlocks() {}, dispose() {},
    forward() { throw new Error('not used'); },
    readCounter: () => counter.snapshot(),
  };
}

