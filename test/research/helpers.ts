// Fixtures shared by the tiered benchmark's row-table tests (tiered.test.ts, mirror.test.ts): a mover with a
// fixed copy lag, a churning wanted hot set, and the one safety check every step must pass.
import assert from 'node:assert/strict';
import type { RowCopy, RowMover } from '../../bench/research/rows.ts';

/** A mover whose copies finish `lag` steps after they are issued; remembers rows being written. */
export class LaggedMover implements RowMover {
  step = 0;
  readonly batches: Array<{ at: number; copies: readonly RowCopy[] }> = [];
  constructor(private readonly lag: number) {}
  copy(copies: readonly RowCopy[]): number { this.batches.push({ at: this.step, copies }); return this.batches.length - 1; }
  done(t: number): boolean { return this.step - this.batches[t]!.at >= this.lag; }
  writing(): Set<string> {
    const s = new Set<string>();
    for (const b of this.batches) if (this.step - b.at < this.lag) for (const c of b.copies) s.add(`${c.layer}:${c.dst}`);
    return s;
  }
}

/** `tries` random attempts to swap a wanted-hot expert for a wanted-cold one in a random layer. */
export function churnWanted(want: Uint8Array, rand: () => number, layers: number, experts: number, tries: number): void {
  for (let k = 0; k < tries; k++) {
    const l = Math.floor(rand() * layers);
    const a = l * experts + Math.floor(rand() * experts);
    const b = l * experts + Math.floor(rand() * experts);
    if (want[a] && !want[b]) { want[a] = 0; want[b] = 1; }
  }
}

/**
 * Each layer's experts read distinct slots, none of them a row a copy in `busy` is writing; `more` adds a
 * table-specific check per (layer, expert, slot).
 */
export function assertSafeReads(
  slots: Int32Array, busy: Set<string>, layers: number, experts: number, lag: number, s: number,
  more?: (l: number, e: number, slot: number) => void,
): void {
  for (let l = 0; l < layers; l++) {
    const used = new Set<number>();
    for (let e = 0; e < experts; e++) {
      const slot = slots[l * experts + e]!;
      assert.ok(!busy.has(`${l}:${slot}`), `lag ${lag} step ${s}: layer ${l} expert ${e} reads row ${slot} while a copy writes it`);
      assert.ok(!used.has(slot), `lag ${lag} step ${s}: two experts read slot ${slot}`);
      more?.(l, e, slot);
      used.add(slot);
    }
  }
}
