// POST /v1/completions: text (or token ids) in, text out; streamed as SSE when `stream` is true.
import { randomUUID } from 'node:crypto';
import type { Context } from 'hono';
import { ApiError } from './api-error.ts';
import { readJsonBody } from './body.ts';
import { checkPromptChars, encodePrompt } from './prompt-tokenizer.ts';
import { admit, relay, resolveMaxTokens, samplingFrom } from './relay.ts';
import type { RelayContext, RelayItem } from './relay.ts';
import { completionSchema } from './schemas.ts';
import { sseResponse } from './sse.ts';
import type { ServerConfig, ServerModel } from './types.ts';

/** OpenAI's default for the legacy completions endpoint. */
const DEFAULT_MAX_TOKENS = 16;

export interface Usage { prompt_tokens: number; completion_tokens: number; total_tokens: number }

export function usageOf(done: Extract<RelayItem, { type: 'done' }>): Usage {
  return { prompt_tokens: done.promptTokens, completion_tokens: done.completionTokens, total_tokens: done.promptTokens + done.completionTokens };
}

/** The served model's name, checked against the request's `model` when one is given. */
export function checkModel(model: ServerModel, asked: string | undefined): void {
  if (asked !== undefined && asked !== model.name) {
    throw new ApiError(404, `model '${asked}' is not served here; this server serves '${model.name}' (see GET /v1/models)`, { param: 'model', code: 'model_not_found' });
  }
}

export function stopsOf(stop: string | string[] | null | undefined): string[] {
  return stop == null ? [] : typeof stop === 'string' ? [stop] : stop;
}

/** Aborts when either the HTTP request or the SSE stream is closed by the client. */
export function clientGone(c: Context): AbortController {
  const ac = new AbortController();
  const sig = c.req.raw.signal;
  if (sig.aborted) ac.abort();
  else sig.addEventListener('abort', () => ac.abort(), { once: true });
  return ac;
}

export async function handleCompletion(c: Context, ctx: RelayContext, model: ServerModel, config: ServerConfig): Promise<Response> {
  const req = await readJsonBody(c, completionSchema(model.maxPositions), config.maxBodyBytes);
  checkModel(model, req.model);
  if (typeof req.prompt === 'string') checkPromptChars(req.prompt.length, model.maxPositions, config, 'prompt');
  const promptIds = typeof req.prompt === 'string' ? await encodePrompt(model.tokenizer, req.prompt) : req.prompt;
  if (typeof req.prompt !== 'string') {
    const bad = req.prompt.findIndex((t) => t >= model.tokenizer.vocabSize);
    if (bad >= 0) throw new ApiError(400, `prompt[${bad}] is token id ${req.prompt[bad]}, outside the vocabulary (0..${model.tokenizer.vocabSize - 1})`, { param: `prompt[${bad}]`, code: 'invalid_value' });
  }
  const maxTokens = resolveMaxTokens(req.max_tokens, promptIds.length, model.maxPositions, 'max_tokens', DEFAULT_MAX_TOKENS);
  admit(ctx);
  const gone = clientGone(c);
  const items = relay(ctx, { promptIds, sampling: samplingFrom(req, maxTokens), stops: stopsOf(req.stop) }, gone.signal);
  const id = `cmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const base = { id, object: 'text_completion', created, model: model.name };

  if (req.stream) {
    const includeUsage = req.stream_options?.include_usage === true;
    async function* chunks() {
      for await (const it of items) {
        if (it.type === 'text') {
          yield { ...base, choices: [{ index: 0, text: it.text, logprobs: null, finish_reason: null }] };
        } else {
          yield { ...base, choices: [{ index: 0, text: '', logprobs: null, finish_reason: it.finishReason }] };
          if (includeUsage) yield { ...base, choices: [], usage: usageOf(it) };
        }
      }
    }
    return sseResponse(chunks(), gone);
  }

  let text = '';
  for await (const it of items) {
    if (it.type === 'text') text += it.text;
    else return c.json({ ...base, choices: [{ index: 0, text, logprobs: null, finish_reason: it.finishReason }], usage: usageOf(it) });
  }
  throw new ApiError(500, 'the engine ended the request without a done event', { code: 'internal' });
}
