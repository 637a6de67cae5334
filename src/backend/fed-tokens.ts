// FED_TOKEN (run-ahead decoding) resolved on the host, for backends that take the argmax there.
import { ResidencyError } from '../errors.ts';
import { FED_TOKEN, type SequenceChunk, type StepInput, type StepOutput } from './backend.ts';

/**
 * FED_TOKEN for a backend that takes the argmax on the host: each sequence's argmax of the last step, put in
 * for a fed chunk of the next one (and only the next: any step in between forgets them).
 */
export class HostFedTokens {
  private last = new Map<number, number>();

  /** The input with every fed token replaced; throws naming the chunk when a fed token has no argmax to come from. */
  resolve(input: StepInput): StepInput {
    const last = this.last;
    this.last = new Map();
    if (!input.chunks.some((c) => c.tokens.includes(FED_TOKEN))) return input;
    return { ...input, chunks: withFedTokens(input.chunks, (seq) => last.get(seq)) };
  }

  /** Remembers the step's argmax per sequence (an argmaxOnly step), for the next step's fed tokens. */
  record(input: StepInput, out: StepOutput): void {
    if (out.argmax) input.chunks.forEach((c, i) => this.last.set(c.seq, out.argmax![i]!));
  }
}

/** The chunks with each fed token replaced by `tokenOf` its sequence; throws naming the chunk when it has none. */
export function withFedTokens(chunks: readonly SequenceChunk[], tokenOf: (seq: number) => number | undefined): SequenceChunk[] {
  return chunks.map((c) => {
    if (!c.tokens.includes(FED_TOKEN)) return c;
    const t = c.tokens.length === 1 ? tokenOf(c.seq) : undefined;
    if (t === undefined) throw fedTokenError(c);
    return { ...c, tokens: [t] };
  });
}

/** The refusal of a fed token that no argmax of the step just before can fill. */
export function fedTokenError(c: SequenceChunk): ResidencyError {
  return new ResidencyError('BAD_ARGUMENT', `forward: seq ${c.seq} has a fed token (FED_TOKEN) but ${c.tokens.length !== 1 ? `${c.tokens.length} tokens (a fed chunk has one)` : 'the step just before was not an argmaxOnly step holding it'}`);
}

