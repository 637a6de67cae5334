// Test helper: a paged backend whose "model" reads its whole context through the block tables, so a wrong table,
// a prefix hit on the wrong block, a copy-on-write not made or a block given to two sequences at once shows as a
// wrong token. Each position's slot stores the token written there; a chunk's next token is a hash of the tokens
// it reads back at positions 0..last (pagedFakeNext computes the same from the true tokens).
import { ResidencyError } from '../errors.ts';
import { FED_TOKEN, type Backend, type KvPool, type PendingStep, type StepInput, type StepOutput } from '../backend/backend.ts';
import type { ModelSpec } from '../model/spec.ts';
import { FakeBanks } from './fake-backend.ts';

export const PAGED_FAKE_VOCAB = 97;

/** The token the fake picks after `tokens` (what it computes when its cache reads back right). */
export function pagedFakeNext(tokens: readonly number[]): number {
  let h = 2166136261;
  for (const t of tokens) h = Math.imul(h ^ (t + 1), 16777619) >>> 0;
  return h % PAGED_FAKE_VOCAB;
}

export interface PagedFake extends Backend {
  readonly kvCache: KvPool;
  /** Steps run, block copies made. */
  steps: number;
  copies: number;
}

/** A fake paged backend of `numBlocks` blocks of `blockSize` positions (one slot a position: the token written there). */
export function pagedFakeBackend(numBlocks: number, blockSize: number, opts: { submit?: boolean } = {}): PagedFake {
  const slots = new Int32Array(numBlocks * blockSize).fill(-1);
  const pool: KvPool = { blockSize, numBlocks, dtype: 'float32', bytesPerBlock: 4 * blockSize };
  const V = PAGED_FAKE_VOCAB;
  const spec = { name: 'paged-fake', numLayers: 3, numExperts: 16, topK: 2, vocabSize: V, maxPositions: 1 << 20, eosTokenIds: [] as number[] } as unknown as ModelSpec;
  let lastArgmax = new Map<number, number>();
  const be: PagedFake = {
    name: 'paged-fake', spec, banks: new FakeBanks(), kvCache: pool, steps: 0, copies: 0,
    readCounter: () => new Uint32Array(3 * 16),
    dispose() {},
    copyBlocks(pairs) {
      for (const [src, dst] of pairs) {
        slots.copyWithin(dst * blockSize, src * blockSize, (src + 1) * blockSize);
        be.copies++;
      }
    },
    forward(input: StepInput): StepOutput {
      const fed = lastArgmax;
      lastArgmax = new Map();
      const written = new Set<number>();
      const slot = (table: readonly number[], p: number): number => {
        const b = table[Math.floor(p / blockSize)];
        if (b === undefined || !Number.isInteger(b) || b < 0 || b >= numBlocks) throw new ResidencyError('BAD_ARGUMENT', `position ${p}: no block in the table`);
        return b * blockSize + (p % blockSize);
      };
      // Check every chunk first (a bad step changes nothing), then write, then read.
      for (const c of input.chunks) {
        if (!c.blockTable) throw new ResidencyError('BAD_ARGUMENT', `seq ${c.seq}: no block table`);
        for (let j = 0; j < c.tokens.length; j++) {
          const b = c.blockTable[Math.floor((c.startPos + j) / blockSize)]!;
          slot(c.blockTable, c.startPos + j);
          if (j === 0 || (c.startPos + j) % blockSize === 0) {
            if (written.has(b)) throw new ResidencyError('BAD_ARGUMENT', `block ${b} written by two chunks of one step`);
            written.add(b);
          }
        }
      }
      const argmax = new Int32Array(input.chunks.length);
      input.chunks.forEach((c, i) => {
        const tokens = c.tokens.map((t) => (t === FED_TOKEN ? fed.get(c.seq)! : t));
        tokens.forEach((t, j) => (slots[slot(c.blockTable!, c.startPos + j)] = t));
        const end = c.startPos + tokens.length;
        const seen: number[] = [];
        for (let p = 0; p < end; p++) {
          const t = slots[slot(c.blockTable!, p)]!;
          if (t < 0) throw new ResidencyError('INTERNAL', `seq ${c.seq} reads position ${p}, never written`);
          seen.push(t);
        }
        argmax[i] = pagedFakeNext(seen);
        lastArgmax.set(c.seq, argmax[i]!);
      });
      be.steps++;
      const logits = input.argmaxOnly ? new Float32Array(0) : (input.logitsInto?.subarray(0, input.chunks.length * V) ?? new Float32Array(input.chunks.length * V));
      if (!input.argmaxOnly) {
        logits.fill(0);
        argmax.forEach((a, i) => (logits[i * V + a] = 1));
      }
      return input.argmaxOnly ? { logits, argmax } : { logits };
    },
  };
  if (opts.submit) {
    (be as { submit?: (input: StepInput) => PendingStep }).submit = (input) => {
      const out = be.forward(input);
      return { wait: () => out };
    };
  }
  return be;
}
