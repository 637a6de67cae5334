// The checkpoint's tokenizer (tokenizer.json, via @huggingface/tokenizers), behind the small surface
// the engine and server use.

import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { ResidencyError } from '../errors.ts';
import { readRegularFile } from '../util/regular-file.ts';

export interface Tokenizer {
  /** Text -> token ids, with no special tokens added (prompts are raw text; templates add their own). */
  encode(text: string): number[];
  /**
   * Token ids -> text. Ids the tokenizer does not know (e.g. padded embedding rows past its vocabulary)
   * decode to nothing, as in transformers; a negative or fractional id is a caller bug (BAD_ARGUMENT).
   */
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
  /** Ids that end generation (config.json's eos_token_id, else tokenizer_config.json's eos_token). */
  readonly eosTokenIds: readonly number[];
  /** One past the largest token id the tokenizer can produce (added tokens included). */
  readonly vocabSize: number;
}

/** How many embedding rows past the tokenizer's vocabulary a config may hold as padding: 1,024, or 2% of it. */
export function vocabPadding(vocabSize: number): number {
  return Math.max(1024, Math.ceil(vocabSize * 0.02));
}

async function readJson(path: string, what: string, required: boolean): Promise<Record<string, unknown> | null> {
  let text: string;
  try {
    text = await readRegularFile(path);
  } catch (e) {
    if (!required && (e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new ResidencyError('BAD_CHECKPOINT', `cannot read ${what} ${path}: ${(e as Error).message}`, { cause: e });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ResidencyError('BAD_CHECKPOINT', `${what} ${path} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ResidencyError('BAD_CHECKPOINT', `${what} ${path} must be a JSON object`);
  }
  return json as Record<string, unknown>;
}

/** tokenizer_config.json names special tokens either as a string or as {content: string}. */
function tokenContent(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string') {
    return (v as { content: string }).content;
  }
  return null;
}

/**
 * Loads `dir/tokenizer.json` (+ optional tokenizer_config.json). `eosTokenIds` from config.json take
 * precedence over the tokenizer config's eos_token.
 */
export async function loadTokenizer(dir: string, opts: { eosTokenIds?: readonly number[] } = {}): Promise<Tokenizer> {
  const tokJson = (await readJson(join(dir, 'tokenizer.json'), 'tokenizer', true))!;
  const tokConfig = (await readJson(join(dir, 'tokenizer_config.json'), 'tokenizer config', false)) ?? {};
  let hf: HfTokenizer;
  try {
    hf = new HfTokenizer(tokJson, tokConfig);
  } catch (e) {
    throw new ResidencyError('BAD_CHECKPOINT', `tokenizer ${join(dir, 'tokenizer.json')} could not be built: ${(e as Error).message}`, { cause: e });
  }
  let vocabSize = 0;
  for (const id of hf.get_vocab(true).values()) vocabSize = Math.max(vocabSize, id + 1);

  let eosTokenIds = opts.eosTokenIds && opts.eosTokenIds.length > 0 ? [...opts.eosTokenIds] : [];
  if (eosTokenIds.length === 0) {
    const eos = tokenContent(tokConfig['eos_token']);
    const id = eos === null ? undefined : hf.token_to_id(eos);
    if (id !== undefined) eosTokenIds = [id];
  }
  Object.freeze(eosTokenIds);

  return {
    encode: (text) => hf.encode(text, { add_special_tokens: false }).ids,
    decode: (ids, o) => {
      ids.forEach((id, i) => {
        if (!Number.isInteger(id) || id < 0) {
          throw new ResidencyError('BAD_ARGUMENT', `decode: token id ${id} at position ${i} is not a non-negative integer`);
        }
      });
      if (ids.length === 0) return ''; // the library refuses an empty list
      return hf.decode([...ids], { skip_special_tokens: o?.skipSpecial ?? false, clean_up_tokenization_spaces: false });
    },
    eosTokenIds,
    vocabSize,
  };
}
