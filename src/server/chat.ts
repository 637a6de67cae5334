// POST /v1/chat/completions: messages in (through the chat template), an assistant message out.
import { randomUUID } from 'node:crypto';
import type { Context } from 'hono';
import { ApiError } from './api-error.ts';
import { readJsonBody } from './body.ts';
import type { ChatFormatter } from './chat-template.ts';
import { checkModel, clientGone, stopsOf, usageOf } from './completions.ts';
import { checkPromptChars, encodePrompt } from './prompt-tokenizer.ts';
import { admit, relay, resolveMaxTokens, samplingFrom } from './relay.ts';
import type { RelayContext } from './relay.ts';
import { chatSchema } from './schemas.ts';
import { sseResponse } from './sse.ts';
import type { ServerConfig, ServerModel } from './types.ts';

const DEFAULT_MAX_TOKENS = 256;

export async function handleChat(c: Context, ctx: RelayContext, model: ServerModel, chat: ChatFormatter, config: ServerConfig): Promise<Response> {
  const req = await readJsonBody(c, chatSchema(model.maxPositions), config.maxBodyBytes);
  checkModel(model, req.model);
  const chars = req.messages.reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : m.content.reduce((k, p) => k + p.text.length, 0)), 0);
  checkPromptChars(chars, model.maxPositions, config, 'messages');
  let prompt: string;
  try {
    prompt = chat.render(req.messages);
  } catch (e) {
    throw new ApiError(400, `the chat template could not render these messages: ${(e as Error).message}`, { param: 'messages', code: 'invalid_value' });
  }
  checkPromptChars(prompt.length, model.maxPositions, config, 'messages');
  const promptIds = await encodePrompt(model.tokenizer, prompt);
  const asked = req.max_completion_tokens ?? req.max_tokens;
  const param = req.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  const maxTokens = resolveMaxTokens(asked, promptIds.length, model.maxPositions, param, DEFAULT_MAX_TOKENS);
  admit(ctx);
  const gone = clientGone(c);
  const items = relay(ctx, { promptIds, sampling: samplingFrom(req, maxTokens), stops: stopsOf(req.stop) }, gone.signal);
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);

  if (req.stream) {
    const base = { id, object: 'chat.completion.chunk', created, model: model.name };
    const includeUsage = req.stream_options?.include_usage === true;
    async function* chunks() {
      yield { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] };
      for await (const it of items) {
        if (it.type === 'text') {
          yield { ...base, choices: [{ index: 0, delta: { content: it.text }, logprobs: null, finish_reason: null }] };
        } else {
          yield { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: it.finishReason }] };
          if (includeUsage) yield { ...base, choices: [], usage: usageOf(it) };
        }
      }
    }
    return sseResponse(chunks(), gone);
  }

  let text = '';
  for await (const it of items) {
    if (it.type === 'text') text += it.text;
    else {
      return c.json({
        id, object: 'chat.completion', created, model: model.name,
        choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: it.finishReason }],
        usage: usageOf(it),
      });
    }
  }
  throw new ApiError(500, 'the engine ended the request without a done event', { code: 'internal' });
}
