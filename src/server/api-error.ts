// OpenAI-style errors: every 4xx/5xx body is {"error":{"message","type","param","code"}}.
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { ResidencyError } from '../errors.ts';

export interface ApiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** An error the HTTP layer turns into a status and an OpenAI-style body. */
export class ApiError extends Error {
  readonly status: ContentfulStatusCode;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
  readonly headers: Record<string, string>;
  constructor(status: ContentfulStatusCode, message: string, opts: { type?: string; param?: string | null; code?: string | null; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.type = opts.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = opts.param ?? null;
    this.code = opts.code ?? null;
    this.headers = opts.headers ?? {};
  }
  body(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** Maps anything thrown in a handler to an ApiError: product errors keep their code, the rest are 500. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof ResidencyError) {
    const status: ContentfulStatusCode =
      err.code === 'NOT_AVAILABLE' ? 503 : err.code === 'INTERNAL' || err.code === 'CUDA_ERROR' ? 500 : 400;
    return new ApiError(status, err.message, { code: err.code.toLowerCase() });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, `internal error: ${message}`, { code: 'internal' });
}

export function errorResponse(c: Context, err: unknown): Response {
  const e = toApiError(err);
  for (const [k, v] of Object.entries(e.headers)) c.header(k, v);
  return c.json(e.body(), e.status);
}
