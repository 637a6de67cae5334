// The JSON grammar as a TokenConstraint over a tokenizer's vocabulary: each step, a token is allowed when
// its whole text continues a valid value from the current state.
import type { TokenConstraint } from '../engine/types.ts';
import { advance, initialState, isComplete, type GrammarState, type ValueShape } from './json-grammar.ts';

/**
 * Each token id's text, '' for tokens that can never appear in JSON output (special tokens, EOS).
 * A byte-level piece of a multi-byte character decodes to U+FFFD alone: it is allowed inside strings,
 * where any character is, and the bytes around it complete the character.
 */
export type VocabText = readonly string[];

export class JsonConstraint implements TokenConstraint {
  private state: GrammarState;

  constructor(private readonly vocab: VocabText, root: ValueShape) {
    this.state = initialState(root);
  }

  get complete(): boolean {
    return isComplete(this.state);
  }

  mask(logits: Float32Array, off: number, V: number): void {
    // Most tokens fail on their first character: try each distinct first character once.
    const firstOk = new Map<string, boolean>();
    for (let id = 0; id < V; id++) {
      const text = this.vocab[id] ?? '';
      let ok = text !== '';
      if (ok) {
        const c0 = text[0]!;
        let f = firstOk.get(c0);
        if (f === undefined) firstOk.set(c0, (f = advance(this.state, c0) !== null));
        ok = f && advance(this.state, text) !== null;
      }
      if (!ok) logits[off + id] = -Infinity;
    }
  }

  accept(tokenId: number): void {
    const next = advance(this.state, this.vocab[tokenId] ?? '');
    if (next === null) throw new Error(`token ${tokenId} does not continue the JSON output (the constraint's mask was not applied)`);
    this.state = next;
  }
}

/** The vocabulary's texts from a tokenizer (one decode per id), with the given ids blanked. */
export function vocabText(decode: (ids: number[]) => string, vocabSize: number, never: (id: number) => boolean): string[] {
  const out = new Array<string>(vocabSize);
  for (let id = 0; id < vocabSize; id++) out[id] = never(id) ? '' : decode([id]);
  return out;
}
