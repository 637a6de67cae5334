// Checks a JSON request body's bytes: strict UTF-8, nesting within MAX_BODY_NESTING (on the text, before
// parsing), JSON, no unpaired surrogates, then the endpoint's schema, whose first issue becomes a 400 naming
// the field. Pure and linear in the body, so the same code runs inline for small bodies and in a worker
// thread for large ones (body.ts): either way the answer is the same.
import type { z } from 'zod';
import { parseControl } from '../residency/control.ts';
import { fieldPath } from '../util/field-path.ts';
import { nestingPastCap } from '../util/json-depth.ts';
import { chatSchema, completionSchema, detokenizeSchema, tokenizeSchema, type ChatRequest, type CompletionRequest } from './schemas.ts';

/** Nesting deeper than this is refused before parsing, as JSON parsers in servers cap it (OpenAI bodies nest a few levels). */
export const MAX_BODY_NESTING = 512;

/**
 * Which schema a body is checked against, as plain data (it crosses to the worker thread): the endpoints'
 * schemas depend only on the model's context length and vocabulary size.
 */
export type BodySchema =
  | { readonly name: 'completion'; readonly maxPositions: number }
  | { readonly name: 'chat'; readonly maxPositions: number }
  | { readonly name: 'tokenize' }
  | { readonly name: 'detokenize'; readonly vocabSize: number }
  /** A residency control command, checked by the residency system's own parser. */
  | { readonly name: 'control' };

type Detokenize = z.output<ReturnType<typeof detokenizeSchema>>;
/** What a body checked against `S` holds. */
export type BodyOf<S extends BodySchema> =
  S extends { name: 'completion' } ? CompletionRequest
    : S extends { name: 'chat' } ? ChatRequest
      : S extends { name: 'tokenize' } ? z.output<typeof tokenizeSchema>
        : S extends { name: 'detokenize' } ? Detokenize
          : unknown;

/** An error as plain data: ApiError's fields. */
export interface BodyError {
  readonly status: 400;
  readonly message: string;
  readonly code: string;
  readonly param: string | null;
}

export type BodyCheck = { readonly ok: true; readonly data: unknown; readonly ignored: string[] } | { readonly ok: false; readonly error: BodyError };

const schemas = new Map<string, z.ZodType>();
function schemaOf(s: Exclude<BodySchema, { name: 'control' }>): z.ZodType {
  const key = JSON.stringify(s);
  let schema = schemas.get(key);
  if (!schema) {
    schema = s.name === 'completion' ? completionSchema(s.maxPositions) : s.name === 'chat' ? chatSchema(s.maxPositions) : s.name === 'tokenize' ? tokenizeSchema : detokenizeSchema(s.vocabSize);
    schemas.set(key, schema);
  }
  return schema;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
const fail = (message: string, code: string, param: string | null = null): BodyCheck => ({ ok: false, error: { status: 400, message, code, param } });

/** Checks a body's bytes against `schema`; unknown top-level fields of an object schema are named in `ignored`. */
export function checkBody(bytes: Uint8Array, schema: BodySchema): BodyCheck {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return fail('request body is not valid UTF-8', 'invalid_utf8');
  }
  // On the text, in one pass, before anything walks it: the parser and the checks after it never see more
  // than MAX_BODY_NESTING levels.
  const deep = nestingPastCap(text, MAX_BODY_NESTING);
  if (deep >= 0) return fail(`request body nests deeper than ${MAX_BODY_NESTING} levels (at character ${deep}); no request field needs that`, 'too_deep');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return fail(`request body is not valid JSON: ${(e as Error).message}`, 'invalid_json');
  }
  const lone = SURROGATE_ESCAPE.test(text) ? loneSurrogateAt(json) : null;
  if (lone !== null) {
    return fail(`${lone || 'body'}: a string holds an unpaired UTF-16 surrogate (a \\ud800-\\udfff escape without its pair); send valid Unicode`, 'invalid_unicode', lone || null);
  }
  if (schema.name === 'control') {
    const parsed = parseControl(json);
    return parsed.ok ? { ok: true, data: parsed.command, ignored: [] } : fail(`control rejected, nothing changed: ${parsed.error}`, 'bad_control');
  }
  const zod = schemaOf(schema);
  const shape = (zod as unknown as { shape?: Record<string, unknown> }).shape;
  const ignored = shape && typeof json === 'object' && json !== null && !Array.isArray(json) ? Object.keys(json).filter((k) => !(k in shape)) : [];
  const parsed = zod.safeParse(json);
  return parsed.success ? { ok: true, data: parsed.data, ignored } : { ok: false, error: issueToError(parsed.error) };
}

/** The first zod issue as an error naming the field (unknown keys are named themselves). */
function issueToError(error: z.ZodError): BodyError {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const keys = (issue as { keys: string[] }).keys;
    const param = fieldPath([...issue.path, keys[0]!]);
    return { status: 400, message: `unknown field${keys.length > 1 ? 's' : ''} ${keys.map((k) => `'${fieldPath([...issue.path, k])}'`).join(', ')}: not supported by this server`, param, code: 'unknown_field' };
  }
  const param = fieldPath(issue.path);
  return { status: 400, message: `${param || 'body'}: ${issue.message}`, param: param || null, code: 'invalid_value' };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** A \\u escape of a surrogate: strict UTF-8 has none, so a lone one can only come from such an escape. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/**
 * The path of the first string (or key) with an unpaired surrogate, '' for the top level, null when all
 * are well formed. JSON's \\u escapes can spell what UTF-8 cannot; a tokenizer would see garbage. Each value
 * is visited once and remembers only its parent and key (the path is built for the one that fails), so the
 * walk is linear in the body whatever its shape.
 */
function loneSurrogateAt(root: unknown): string | null {
  const values: unknown[] = [root];
  const parents: number[] = [-1];
  const keys: (string | number)[] = [''];
  const pathOf = (at: number): string => {
    const path: (string | number)[] = [];
    for (let i = at; i > 0; i = parents[i]!) path.push(keys[i]!);
    return fieldPath(path.reverse());
  };
  const stack: number[] = [0];
  while (stack.length > 0) {
    const at = stack.pop()!;
    const v = values[at];
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v)) return pathOf(at);
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) {
        stack.push(values.length);
        values.push(v[i]); parents.push(at); keys.push(i);
      }
    } else if (typeof v === 'object' && v !== null) {
      const entries = Object.entries(v);
      for (const [k] of entries) if (LONE_SURROGATE.test(k)) return pathOf(at);
      for (let i = entries.length - 1; i >= 0; i--) {
        stack.push(values.length);
        values.push(entries[i]![1]); parents.push(at); keys.push(entries[i]![0]);
      }
    }
  }
  return null;
}
