// The checks both CUDA paths make on a step's chunks before anything is uploaded or launched, so a bad step
// is refused whole and changes nothing.
import { ResidencyError } from '../../../errors.ts';
import { FED_TOKEN, type SequenceChunk } from '../../backend.ts';
import { fedTokenError } from '../../fed-tokens.ts';

/**
 * Every chunk's sequence open (capacityOf returns its positions, undefined when not open), at most once,
 * non-empty, inside its capacity (named `capacityName` in the message), tokens in [0, vocabSize) or a chunk's one
 * FED_TOKEN for a sequence `fedFrom` holds (its row in the step just before). Returns the step's token count.
 */
export function checkStepChunks(
  chunks: readonly SequenceChunk[], capacityOf: (seq: number) => number | undefined, vocabSize: number, capacityName: (cap: number) => string,
  fedFrom: ReadonlyMap<number, number> | null = null,
): number {
  if (chunks.length === 0) throw new ResidencyError('BAD_ARGUMENT', 'forward: a step needs at least one chunk');
  const seen = new Set<number>();
  let T = 0;
  for (const c of chunks) {
    const cap = capacityOf(c.seq);
    if (cap === undefined) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} is not open (call openSequence first)`);
    if (seen.has(c.seq)) throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} appears twice in one step`);
    seen.add(c.seq);
    if (c.tokens.length === 0) throw new ResidencyError('BAD_ARGUMENT', `forward: chunk for seq ${c.seq} has no tokens`);
    if (!Number.isInteger(c.startPos) || c.startPos < 0 || c.startPos + c.tokens.length > cap) {
      throw new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} positions ${c.startPos}..${c.startPos + c.tokens.length - 1} exceed ${capacityName(cap)}`);
    }
    if (c.tokens.includes(FED_TOKEN)) {
      if (c.tokens.length !== 1 || !fedFrom?.has(c.seq)) throw fedTokenError(c);
      T += 1;
      continue;
    }
    for (const t of c.tokens) {
      if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
        throw new ResidencyError('BAD_ARGUMENT', `forward: token ${t} of seq ${c.seq} is not in [0, ${vocabSize})`);
      }
    }
    T += c.tokens.length;
  }
  return T;
}
