// response_format (and forced tool calls) as a constraint on decoding: the request's schema compiled
// once, a fresh JSON constraint per sequence over the tokenizer's vocabulary texts (cached per tokenizer).
import type { TokenConstraint } from '../engine/types.ts';
import type { ValueShape } from '../structured/json-grammar.ts';
import { SchemaError, compileSchema } from '../structured/schema.ts';
import { JsonConstraint, vocabText, type VocabText } from '../structured/vocab-constraint.ts';
import { ApiError } from './api-error.ts';
import type { ResponseFormat } from './schemas.ts';
import type { ServerTokenizer } from './types.ts';

const vocabs = new WeakMap<ServerTokenizer, VocabText>();

/** Each token's text; EOS and special tokens never appear in JSON output. */
function vocabOf(tok: ServerTokenizer): VocabText {
  let v = vocabs.get(tok);
  if (!v) {
    const eos = new Set(tok.eosTokenIds);
    v = vocabText((ids) => tok.decode(ids), tok.vocabSize, (id) => eos.has(id) || (tok.isSpecial?.(id) ?? false));
    vocabs.set(tok, v);
  }
  return v;
}

export type ConstraintFactory = () => TokenConstraint;

/** A factory of per-sequence constraints for `shape`. */
export function jsonConstraints(tok: ServerTokenizer, shape: ValueShape): ConstraintFactory {
  const vocab = vocabOf(tok);
  return () => new JsonConstraint(vocab, shape);
}

/** Compiles a JSON schema from a request, naming the field on a schema this server cannot enforce. */
export function shapeOf(schema: unknown, param: string): ValueShape {
  try {
    const shape = compileSchema(schema, param);
    if (shape.t !== 'object' && shape.t !== 'array') throw new SchemaError(param, 'the top level must be an object or an array');
    return shape;
  } catch (e) {
    if (e instanceof SchemaError) throw new ApiError(400, e.message, { param: e.path, code: 'invalid_value' });
    throw e;
  }
}

/** response_format -> constraints; undefined for text. */
export function responseFormatConstraints(format: ResponseFormat | null | undefined, tok: ServerTokenizer): ConstraintFactory | undefined {
  if (!format || format.type === 'text') return undefined;
  if (format.type === 'json_object') return jsonConstraints(tok, { t: 'object', props: null });
  const schema = format.json_schema.schema ?? {};
  return jsonConstraints(tok, shapeOf(schema, 'response_format.json_schema.schema'));
}
