// The JSON grammar as a TokenConstraint over a tokenizer's vocabulary: each step, a token is allowed when
// its whole text continues a valid value from the current state. The vocabulary is walked as a trie, so a
// shared prefix is stepped once and a failing prefix prunes every token below it.
import type { TokenConstraint } from '../engine/types.ts';
import { advance, initialState, isComplete, type GrammarState, type ValueShape } from './json-grammar.ts';

/**
 * Each token id's text, '' for tokens that can never appear in JSON output (special tokens, EOS).
 * A byte-level piece of a multi-byte character decodes to U+FFFD alone: it is allowed inside strings,
 * where any character is, and the bytes around it complete the character.
 */
export type VocabText = readonly string[];

interface TrieNode {
  /** Tokens whose text ends here. */
  readonly ids: number[];
  readonly kids: Map<string, TrieNode>;
}

/** The vocabulary as a trie, plus the tokens that are not plain string content (hold '"', '\\' or a control character). */
interface VocabIndex {
  readonly root: TrieNode;
  /** 1: plain text, which inside a free string changes nothing and is always allowed. */
  readonly plain: Uint8Array;
  readonly notPlain: readonly number[];
}

const indexes = new WeakMap<VocabText, VocabIndex>();

function indexOf(vocab: VocabText): VocabIndex {
  let ix = indexes.get(vocab);
  if (ix) return ix;
  const root: TrieNode = { ids: [], kids: new Map() };
  const plain = new Uint8Array(vocab.length);
  const notPlain: number[] = [];
  vocab.forEach((text, id) => {
    if (text === '') return;
    let node = root;
    for (const ch of text) {
      let next = node.kids.get(ch);
      if (!next) node.kids.set(ch, (next = { ids: [], kids: new Map() }));
      node = next;
    }
    node.ids.push(id);
    if (/["\\\u0000-\u001f]/.test(text)) notPlain.push(id);
    else plain[id] = 1;
  });
  ix = { root, plain, notPlain };
  indexes.set(vocab, ix);
  return ix;
}

export class JsonConstraint implements TokenConstraint {
  private state: GrammarState;
  private readonly index: VocabIndex;
  private allowed: Uint8Array;

  constructor(private readonly vocab: VocabText, root: ValueShape) {
    this.state = initialState(root);
    this.index = indexOf(vocab);
    this.allowed = new Uint8Array(vocab.length);
  }

  get complete(): boolean {
    return isComplete(this.state);
  }

  mask(logits: Float32Array, off: number, V: number): void {
    const allowed = this.allowed;
    allowed.fill(0);
    const f = this.state.f;
    if (f.k === 'str' && f.values === null && f.esc === 0) {
      // Inside a free string (most of a JSON text's tokens): plain text is always allowed; walk the rest.
      allowed.set(this.index.plain);
      for (const id of this.index.notPlain) if (advance(this.state, this.vocab[id]!) !== null) allowed[id] = 1;
    } else {
      this.walk(this.index.root, this.state, allowed);
    }
    for (let id = 0; id < V; id++) if (allowed[id] === 0) logits[off + id] = -Infinity;
  }

  /** Marks every token below `node` whose text continues from `s` (s: the state after node's prefix). */
  private walk(node: TrieNode, s: GrammarState, allowed: Uint8Array): void {
    for (const [ch, kid] of node.kids) {
      const next = advance(s, ch);
      if (next === null) continue;
      for (const id of kid.ids) allowed[id] = 1;
      if (kid.kids.size > 0) this.walk(kid, next, allowed);
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
