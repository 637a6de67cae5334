// The checks the CUDA backend makes on a step's chunks before anything is uploaded or launched, so a bad step is
// refused whole and changes nothing.
import { ResidencyError } from '../../../errors.ts';
import { FED_TOKEN, type KvPool, type SequenceChunk } from '../../backend.ts';
import { fedTokenError } from '../../fed-tokens.ts';

/**
 * Every chunk's sequence at most once, non-empty, its positions inside --max-model-len (`maxBlocks` blocks) and its
 * block table covering them with blocks of the pool, tokens in [0, vocabSize) or a chunk's one FED_TOKEN for a
 * sequence `fedFrom` holds (its row in the step just before). Returns the step's token count.
 */
export function checkStepChunks(
  chunks: readonly SequenceChunk[], pool: KvPool, maxBlocks: number, vocabSize: number, fedFrom: ReadonlyMap<number, number> | null = null,
): number {
  if (chunks.length === 0) throw new ResidencyError('BAD_ARGUMENT', 'forward: a step needs at least one chunk');
  const seen = new Set<number>();
  const bs = pool.blockSize;
  let T = 0;
  for (const c of chunks) {
    if (seen.has(c.seq)) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} appears twice in one step`);
    seen.add(c.seq);
    if (c.tokens.length === 0) throw new ResidencyError('BAD_ARGUMENT', `forward: chunk for seq ${c.seq} has no tokens`);
    const end = c.startPos + c.tokens.length;
    if (!Number.isInteger(c.startPos) || c.startPos < 0 || end > maxBlocks * bs) {
      throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} positions ${c.startPos}..${end - 1} are outside 0..${maxBlocks * bs - 1} (--max-model-len)`);
    }
    const t = c.blockTable;
    const need = Math.ceil(end / bs);
    if (!t || t.length < need) {
      throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} positions ${c.startPos}..${end - 1} need a blockTable of ${need} blocks of ${bs} positions (got ${t ? t.length : 'none'})`);
    }
    for (let i = 0; i < need; i++) {
      const b = t[i]!;
      if (!Number.isInteger(b) || b < 0 || b >= pool.numBlocks) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} blockTable[${i}] = ${b} is not a block of the pool [0, ${pool.numBlocks})`);
    }
    if (c.tokens.includes(FED_TOKEN)) {
      if (c.tokens.length !== 1 || !fedFrom?.has(c.seq)) throw fedTokenError(c);
      T += 1;
      continue;
    }
    for (const tok of c.tokens) {
      if (!Number.isInteger(tok) || tok < 0 || tok >= vocabSize) {
        throw new ResidencyError('BAD_ARGUMENT', `forward: token ${tok} of seq ${c.seq} is not in [0, ${vocabSize})`);
      }
    }
    T += c.tokens.length;
  }
  return T;
}
