// POST /v1/chat/completions: messages in (through the chat template, tools included), assistant messages
// out: n choices, logprobs, response_format, tool calls (forced by tool_choice, or parsed back).
import { randomUUID } from 'node:crypto';
import type { Context } from 'hono';
import { ApiError } from './api-error.ts';
import { readJsonRequest } from './body.ts';
import type { ChatFormatter } from './chat-template.ts';
import { collectChoices, mergeRelays, usageOfChoices, type ChoiceResult } from './choices.ts';
import { checkModel, clientGone, stopsOf, warnIgnored } from './completions.ts';
import { chatLogprobs } from './logprobs-format.ts';
import { checkPromptChars, encodePrompt } from './prompt-tokenizer.ts';
import { admit, resolveMaxTokens, samplingFrom, type RelayToken } from './relay.ts';
import type { RelayContext, RelayJob } from './relay.ts';
import type { ChatMessage } from './schemas.ts';
import { sseResponse } from './sse.ts';
import { jsonConstraints, responseFormatConstraints } from './structured-output.ts';
import { forcedCall, parseToolCalls, planTools, type ToolCall, type ToolPlan } from './tools.ts';
import type { ServerConfig, ServerModel } from './types.ts';

const DEFAULT_MAX_TOKENS = 256;

const charsOf = (m: ChatMessage) => (m.content == null ? 0 : typeof m.content === 'string' ? m.content.length : m.content.reduce((k, p) => k + p.text.length, 0));

/** The assistant's message and finish reason for one finished choice. */
function messageOf(r: Pick<ChoiceResult, 'text' | 'finishReason'>, plan: ToolPlan): { message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }; finish: string } {
  if (plan.forced) {
    const call = forcedCall(r.text);
    if (call) return { message: { role: 'assistant', content: null, tool_calls: [call] }, finish: r.finishReason === 'length' ? 'length' : 'tool_calls' };
  } else if (plan.parse) {
    const { content, calls } = parseToolCalls(r.text);
    if (calls.length > 0) return { message: { role: 'assistant', content, tool_calls: calls }, finish: 'tool_calls' };
  }
  return { message: { role: 'assistant', content: r.text }, finish: r.finishReason };
}

export async function handleChat(c: Context, ctx: RelayContext, model: ServerModel, chat: ChatFormatter, config: ServerConfig): Promise<Response> {
  const { data: req, ignored } = await readJsonRequest(c, { name: 'chat', maxPositions: model.maxPositions }, config.maxBodyBytes);
  warnIgnored(c, ctx, ignored);
  checkModel(model, req.model);
  checkPromptChars(req.messages.reduce((n, m) => n + charsOf(m), 0), model.maxPositions, config, 'messages');
  if (req.top_logprobs != null && !req.logprobs) throw new ApiError(400, 'top_logprobs needs logprobs: true', { param: 'top_logprobs', code: 'invalid_value' });
  const plan = planTools(req, chat);
  if (plan.forced && req.response_format && req.response_format.type !== 'text') {
    throw new ApiError(400, "response_format and a forced tool_choice both constrain the output: send one of them", { param: 'response_format', code: 'invalid_value' });
  }
  const prompt = chat.render(req.messages, { tools: plan.tools });
  checkPromptChars(prompt.length, model.maxPositions, config, 'messages');
  const promptIds = await encodePrompt(model.tokenizer, prompt);
  const asked = req.max_completion_tokens ?? req.max_tokens;
  const param = req.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  const maxTokens = resolveMaxTokens(asked, promptIds.length, model.maxPositions, param, DEFAULT_MAX_TOKENS);
  const constraints = plan.forced ? jsonConstraints(model.tokenizer, plan.forced) : responseFormatConstraints(req.response_format, model.tokenizer);
  const top = req.top_logprobs ?? 0;
  const logprobs = req.logprobs ? top : undefined;
  const n = req.n ?? 1;
  const jobs: RelayJob[] = Array.from({ length: n }, (_, k) => ({
    promptIds,
    sampling: samplingFrom(req, maxTokens, { seedOffset: k, ...(logprobs !== undefined ? { logprobs } : {}), ...(constraints ? { constraint: constraints() } : {}) }),
    stops: stopsOf(req.stop),
  }));
  admit(ctx, jobs.length);
  const gone = clientGone(c);
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const lp = (tokens: readonly RelayToken[]) => (logprobs !== undefined ? chatLogprobs(tokens, model.tokenizer, top) : null);

  if (req.stream) {
    const base = { id, object: 'chat.completion.chunk', created, model: model.name };
    const includeUsage = req.stream_options?.include_usage === true;
    // With tools the text may turn out to be a call: it is held and sent whole at the end.
    const holdText = plan.forced !== undefined || plan.parse;
    async function* chunks() {
      for (let i = 0; i < n; i++) yield { ...base, choices: [{ index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] };
      const held = jobs.map(() => ({ text: '', tokens: [] as RelayToken[] }));
      const done: { promptTokens: number; completionTokens: number }[] = jobs.map(() => ({ promptTokens: 0, completionTokens: 0 }));
      for await (const [i, it] of mergeRelays(ctx, jobs, gone.signal)) {
        if (it.type === 'text') {
          if (!holdText) yield { ...base, choices: [{ index: i, delta: { content: it.text }, logprobs: lp(it.tokens ?? []), finish_reason: null }] };
          else { held[i]!.text += it.text; held[i]!.tokens.push(...(it.tokens ?? [])); }
          continue;
        }
        done[i] = it;
        let finish: string = it.finishReason;
        if (holdText) {
          const { message, finish: f } = messageOf({ text: held[i]!.text, finishReason: it.finishReason }, plan);
          finish = f;
          const delta = message.tool_calls
            ? { ...(message.content ? { content: message.content } : {}), tool_calls: message.tool_calls.map((call, index) => ({ index, ...call })) }
            : { content: message.content };
          yield { ...base, choices: [{ index: i, delta, logprobs: lp(held[i]!.tokens), finish_reason: null }] };
        }
        yield { ...base, choices: [{ index: i, delta: {}, logprobs: null, finish_reason: finish }] };
      }
      if (includeUsage) yield { ...base, choices: [], usage: usageOfChoices(done, n) };
    }
    return sseResponse(chunks(), gone);
  }

  const results = await collectChoices(ctx, jobs, gone.signal);
  return c.json({
    id, object: 'chat.completion', created, model: model.name,
    choices: results.map((r, i) => {
      const { message, finish } = messageOf(r, plan);
      return { index: i, message, logprobs: lp(r.tokens), finish_reason: finish };
    }),
    usage: usageOfChoices(results, n),
  });
}
