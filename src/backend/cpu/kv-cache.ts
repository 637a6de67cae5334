// Per-sequence KV caches of the CPU backend: one key and one value array per layer, filled in position order.
import { ResidencyError } from '../../errors.ts';
import { heapAlloc, type Alloc } from './alloc.ts';

export interface SequenceCache {
  readonly capacity: number;
  /** Per layer: [capacity][numKvHeads*headDim] (MLA: keys [capacity][heads*(nope+rope)], values [capacity][heads*v]). */
  readonly keys: Float32Array[];
  readonly values: Float32Array[];
  /** Positions written so far (0..filled-1 are valid). */
  filled: number;
}

export class KvCaches {
  private readonly seqs = new Map<number, SequenceCache>();

  constructor(
    private readonly layers: number,
    private readonly kvWidth: number,
    private readonly maxPositions: number,
    /** Where caches live (shared memory when worker threads read them). */
    private readonly alloc: Alloc = heapAlloc,
    /** Floats per position of the value cache (MLA: narrower than the keys); default kvWidth. */
    private readonly valueWidth: number = kvWidth,
  ) {}

  open(seq: number, capacity: number): void {
    if (!Number.isInteger(seq) || seq < 0) throw new ResidencyError('BAD_ARGUMENT', `seq ${seq}: expected an integer >= 0`);
    if (this.seqs.has(seq)) throw new ResidencyError('BAD_ARGUMENT', `seq ${seq} is already open: close it first`);
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > this.maxPositions) {
      throw new ResidencyError(
        'BAD_ARGUMENT',
        `KV capacity ${capacity} for seq ${seq}: expected an integer in [1, ${this.maxPositions}] (the model's max positions)`,
      );
    }
    const keys: Float32Array[] = [];
    const values: Float32Array[] = [];
    for (let l = 0; l < this.layers; l++) {
      keys.push(this.alloc.f32(capacity * this.kvWidth));
      values.push(this.alloc.f32(capacity * this.valueWidth));
    }
    this.seqs.set(seq, { capacity, keys, values, filled: 0 });
  }

  /** The cache of an open sequence, if any. */
  peek(seq: number): SequenceCache | undefined {
    return this.seqs.get(seq);
  }

  close(seq: number): void {
    const c = this.seqs.get(seq);
    if (c && this.alloc.free) for (const a of [...c.keys, ...c.values]) this.alloc.free(a);
    this.seqs.delete(seq);
  }

  /** The cache for a chunk of `n` tokens at `startPos`, checked: positions before startPos must be written. */
  forChunk(seq: number, startPos: number, n: number): SequenceCache {
    const c = this.seqs.get(seq);
    if (!c) throw new ResidencyError('BAD_ARGUMENT', `seq ${seq} is not open: call openSequence first`);
    if (!Number.isInteger(startPos) || startPos < 0 || startPos > c.filled) {
      throw new ResidencyError(
        'BAD_ARGUMENT',
        `seq ${seq}: startPos ${startPos} must be in [0, ${c.filled}] (the KV cache holds positions 0..${c.filled - 1})`,
      );
    }
    if (startPos + n > c.capacity) {
      throw new ResidencyError(
        'BAD_ARGUMENT',
        `seq ${seq}: positions up to ${startPos + n - 1} exceed its KV capacity ${c.capacity}`,
      );
    }
    return c;
  }

  get size(): number {
    return this.seqs.size;
  }
}
