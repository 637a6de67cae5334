// POST /v1/completions: text (or token ids) in, text out; several prompts and n choices per prompt;
// logprobs, echo, response_format; streamed as SSE when `stream` is true.
import { randomUUID } from 'node:crypto';
import type { Context } from 'hono';
import { ApiError } from './api-error.ts';
import { IGNORED_FIELDS_HEADER, readJsonRequest } from './body.ts';
import { collectChoices, mergeRelays, usageOfChoices } from './choices.ts';
import { completionLogprobs } from './logprobs-format.ts';
import { checkPromptChars, encodePrompt } from './prompt-tokenizer.ts';
import { admit, resolveMaxTokens, samplingFrom } from './relay.ts';
import type { RelayContext, RelayJob } from './relay.ts';
import { sseResponse } from './sse.ts';
import { responseFormatConstraints } from './structured-output.ts';
import type { ServerConfig, ServerModel } from './types.ts';

/** OpenAI's default for the legacy completions endpoint. */
const DEFAULT_MAX_TOKENS = 16;

/** The served model's name, checked against the request's `model` when one is given. */
export function checkModel(model: ServerModel, asked: string | null | undefined): void {
  if (asked != null && asked !== model.name) {
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

/** Names ignored fields in a response header and a log line (vLLM's warning), so clients see them. */
export function warnIgnored(c: Context, ctx: RelayContext, ignored: readonly string[]): void {
  if (ignored.length === 0) return;
  const list = ignored.slice(0, 16).map((k) => k.slice(0, 64).replace(/[^\x20-\x7e]/g, '?'));
  c.header(IGNORED_FIELDS_HEADER, list.join(', '));
  ctx.log(`warning: ${c.req.path}: ignored unknown field${list.length > 1 ? 's' : ''} ${list.join(', ')}`);
}

type Prompt = { text: string | null; ids: readonly number[] };

async function promptsOf(prompt: string | string[] | number[] | number[][], model: ServerModel, config: ServerConfig): Promise<Prompt[]> {
  const list: (string | number[])[] = typeof prompt === 'string' ? [prompt] : typeof prompt[0] === 'number' ? [prompt as number[]] : (prompt as (string | number[])[]);
  const out: Prompt[] = [];
  for (const [p, one] of list.entries()) {
    const param = list.length > 1 ? `prompt[${p}]` : 'prompt';
    if (typeof one === 'string') {
      checkPromptChars(one.length, model.maxPositions, config, param);
      out.push({ text: one, ids: await encodePrompt(model.tokenizer, one) });
      continue;
    }
    const bad = one.findIndex((t) => t >= model.tokenizer.vocabSize);
    if (bad >= 0) throw new ApiError(400, `${param}[${bad}] is token id ${one[bad]}, outside the vocabulary (0..${model.tokenizer.vocabSize - 1})`, { param: `${param}[${bad}]`, code: 'invalid_value' });
    out.push({ text: null, ids: one });
  }
  return out;
}

export async function handleCompletion(c: Context, ctx: RelayContext, model: ServerModel, config: ServerConfig): Promise<Response> {
  const { data: req, ignored } = await readJsonRequest(c, { name: 'completion', maxPositions: model.maxPositions }, config.maxBodyBytes);
  warnIgnored(c, ctx, ignored);
  checkModel(model, req.model);
  const n = req.n ?? 1;
  if (req.best_of != null && req.best_of !== n) throw new ApiError(400, `best_of ${req.best_of}: only best_of = n (${n}) is supported (no server-side ranking)`, { param: 'best_of', code: 'invalid_value' });
  if (req.suffix) throw new ApiError(400, 'suffix: insertion (fill-in-the-middle) is not supported; send the text before the gap as the prompt', { param: 'suffix', code: 'invalid_value' });
  const prompts = await promptsOf(req.prompt, model, config);
  const constraints = responseFormatConstraints(req.response_format, model.tokenizer);
  const logprobs = req.logprobs ?? undefined;
  const jobs: RelayJob[] = [];
  for (const p of prompts) {
    const maxTokens = resolveMaxTokens(req.max_tokens, p.ids.length, model.maxPositions, 'max_tokens', DEFAULT_MAX_TOKENS);
    for (let k = 0; k < n; k++) {
      const sampling = samplingFrom(req, maxTokens, { seedOffset: jobs.length, ...(logprobs !== undefined ? { logprobs } : {}), ...(constraints ? { constraint: constraints() } : {}) });
      jobs.push({ promptIds: p.ids, sampling, stops: stopsOf(req.stop) });
    }
  }
  admit(ctx, jobs.length);
  const gone = clientGone(c);
  const id = `cmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const base = { id, object: 'text_completion', created, model: model.name };
  const promptOf = (i: number) => prompts[Math.floor(i / n)]!;
  const echoText = (i: number) => (req.echo ? (promptOf(i).text ?? model.tokenizer.decode(promptOf(i).ids)) : '');

  if (req.stream) {
    const includeUsage = req.stream_options?.include_usage === true;
    async function* chunks() {
      const offsets = jobs.map((_, i) => echoText(i).length);
      const started = jobs.map(() => false);
      const done: { promptTokens: number; completionTokens: number }[] = jobs.map(() => ({ promptTokens: 0, completionTokens: 0 }));
      for await (const [i, it] of mergeRelays(ctx, jobs, gone.signal)) {
        const echo = started[i] ? '' : echoText(i);
        started[i] = true;
        if (it.type === 'text') {
          const lp = logprobs !== undefined ? completionLogprobs(it.tokens ?? [], model.tokenizer, offsets[i]!) : null;
          offsets[i]! += it.text.length;
          yield { ...base, choices: [{ index: i, text: echo + it.text, logprobs: lp, finish_reason: null }] };
        } else {
          done[i] = it;
          yield { ...base, choices: [{ index: i, text: echo, logprobs: null, finish_reason: it.finishReason }] };
        }
      }
      if (includeUsage) yield { ...base, choices: [], usage: usageOfChoices(done, n) };
    }
    return sseResponse(chunks(), gone);
  }

  const results = await collectChoices(ctx, jobs, gone.signal);
  const choices = results.map((r, i) => {
    const echo = echoText(i);
    const lp = logprobs !== undefined ? completionLogprobs(r.tokens, model.tokenizer, echo.length, req.echo ? promptOf(i).ids : []) : null;
    return { index: i, text: echo + r.text, logprobs: lp, finish_reason: r.finishReason };
  });
  return c.json({ ...base, choices, usage: usageOfChoices(results, n) });
}
