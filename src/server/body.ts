// Reads a JSON request body defensively: a byte limit, strict UTF-8, JSON, then a zod schema whose
// first issue becomes a 400 naming the field.
import type { Context } from 'hono';
import type { z } from 'zod';
import { ApiError } from './api-error.ts';
import { fieldPath } from '../util/field-path.ts';

/** Reads at most `limit` bytes; stops reading (and answers 413) as soon as the body is larger. */
async function readLimited(c: Context, limit: number): Promise<Uint8Array> {
  const declared = c.req.header('content-length');
  if (declared !== undefined && Number(declared) > limit) throw tooLarge(limit);
  const body = c.req.raw.body;
  if (!body) return new Uint8Array(0);
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      throw tooLarge(limit);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const ch of chunks) {
    out.set(ch, at);
    at += ch.byteLength;
  }
  return out;
}

function tooLarge(limit: number): ApiError {
  return new ApiError(413, `request body is larger than ${limit} bytes; send a shorter prompt`, { code: 'body_too_large' });
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The first zod issue as an ApiError naming the field (unknown keys are named themselves). */
export function issueToError(error: z.ZodError): ApiError {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const keys = (issue as { keys: string[] }).keys;
    const param = fieldPath([...issue.path, keys[0]!]);
    return new ApiError(400, `unknown field${keys.length > 1 ? 's' : ''} ${keys.map((k) => `'${fieldPath([...issue.path, k])}'`).join(', ')}: not supported by this server`, { param, code: 'unknown_field' });
  }
  const param = fieldPath(issue.path);
  return new ApiError(400, `${param || 'body'}: ${issue.message}`, { param: param || null, code: 'invalid_value' });
}

/**
 * The path of the first string (or key) with an unpaired surrogate, '' for the top level, null when all
 * are well formed. JSON's \\u escapes can spell what UTF-8 cannot; a tokenizer would see garbage. Walked
 * with an explicit stack: a body is at most maxBodyBytes, but nesting depth is the client's to choose.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function loneSurrogateAt(root: unknown): string | null {
  const stack: [unknown, (string | number)[]][] = [[root, []]];
  while (stack.length > 0) {
    const [v, path] = stack.pop()!;
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v)) return fieldPath(path);
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push([v[i], [...path, i]]);
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (LONE_SURROGATE.test(k)) return fieldPath(path);
        stack.push([x, [...path, k]]);
      }
    }
  }
  return null;
}

export async function readJsonBody<S extends z.ZodType>(c: Context, schema: S, maxBytes: number): Promise<z.output<S>> {
  return (await readJsonRequest(c, schema, maxBytes)).data;
}

/** Header naming the request's top-level fields that this server ignored (vLLM logs the same warning). */
export const IGNORED_FIELDS_HEADER = 'x-ignored-fields';

/**
 * As readJsonBody, and names the top-level fields the (object) schema does not know: they are ignored,
 * not refused, as vLLM does, so clients that send extra fields by default still work.
 */
export async function readJsonRequest<S extends z.ZodType>(c: Context, schema: S, maxBytes: number): Promise<{ data: z.output<S>; ignored: string[] }> {
  const json = await readJson(c, maxBytes);
  const shape = (schema as unknown as { shape?: Record<string, unknown> }).shape;
  const ignored = shape && typeof json === 'object' && json !== null && !Array.isArray(json) ? Object.keys(json).filter((k) => !(k in shape)) : [];
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw issueToError(parsed.error);
  return { data: parsed.data, ignored };
}

async function readJson(c: Context, maxBytes: number): Promise<unknown> {
  // Required, not just checked when present: a web page can send a body without one (or as text/plain)
  // with no CORS preflight, and only application/json forces the browser to ask first.
  const type = c.req.header('content-type');
  if (type === undefined || !/^application\/json\s*(;|$)/i.test(type.trim())) {
    throw new ApiError(415, `content-type must be application/json (got ${type === undefined ? 'none' : `'${type.slice(0, 100)}'`})`, { code: 'unsupported_media_type' });
  }
  const bytes = await readLimited(c, maxBytes);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new ApiError(400, 'request body is not valid UTF-8', { code: 'invalid_utf8' });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, `request body is not valid JSON: ${(e as Error).message}`, { code: 'invalid_json' });
  }
  const lone = loneSurrogateAt(json);
  if (lone !== null) {
    throw new ApiError(400, `${lone || 'body'}: a string holds an unpaired UTF-16 surrogate (a \\ud800-\\udfff escape without its pair); send valid Unicode`, { param: lone || null, code: 'invalid_unicode' });
  }
  return json;
}
