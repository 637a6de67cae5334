// Reads a JSON request body defensively: a byte limit, then body-check.ts's checks (strict UTF-8, a nesting
// cap, JSON, the endpoint's schema), inline for small bodies and in a worker thread for large ones.
import type { Context } from 'hono';
import { ApiError } from './api-error.ts';
import { checkBody, type BodyCheck, type BodyOf, type BodySchema } from './body-check.ts';
import { OffThreadBodies } from './body-worker-client.ts';

export { MAX_BODY_NESTING } from './body-check.ts';

/**
 * Bodies up to this size are checked on the main thread: a few milliseconds at most, whatever their shape.
 * Larger ones go to the worker: parsing a megabyte of small arrays takes V8 ~100 ms, which on the main
 * thread would stall every running stream.
 */
export const INLINE_BODY_BYTES = 16 * 1024;

/** One worker for the process, started with the first large body (it never keeps the process alive). */
const offThread = new OffThreadBodies();

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

export async function readJsonBody<S extends BodySchema>(c: Context, schema: S, maxBytes: number): Promise<BodyOf<S>> {
  return (await readJsonRequest(c, schema, maxBytes)).data;
}

/** Header naming the request's top-level fields that this server ignored (vLLM logs the same warning). */
export const IGNORED_FIELDS_HEADER = 'x-ignored-fields';

/**
 * As readJsonBody, and names the top-level fields the (object) schema does not know: they are ignored,
 * not refused, as vLLM does, so clients that send extra fields by default still work.
 */
export async function readJsonRequest<S extends BodySchema>(c: Context, schema: S, maxBytes: number): Promise<{ data: BodyOf<S>; ignored: string[] }> {
  // Required, not just checked when present: a web page can send a body without one (or as text/plain)
  // with no CORS preflight, and only application/json forces the browser to ask first.
  const type = c.req.header('content-type');
  if (type === undefined || !/^application\/json\s*(;|$)/i.test(type.trim())) {
    throw new ApiError(415, `content-type must be application/json (got ${type === undefined ? 'none' : `'${type.slice(0, 100)}'`})`, { code: 'unsupported_media_type' });
  }
  const bytes = await readLimited(c, maxBytes);
  const result: BodyCheck = bytes.byteLength <= INLINE_BODY_BYTES ? checkBody(bytes, schema) : await offThread.check(bytes, schema);
  if (!result.ok) throw new ApiError(result.error.status, result.error.message, { code: result.error.code, param: result.error.param });
  return { data: result.data as BodyOf<S>, ignored: result.ignored };
}
