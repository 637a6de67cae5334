// Request schemas for /v1/completions and /v1/chat/completions: OpenAI's fields plus vLLM's sampling
// extensions, bounded numbers. Unknown fields are not errors: readJsonBody reports them (ignored, with a
// warning), as vLLM does.
import { z } from 'zod';

/** zod's union messages say only "Invalid input": say what is expected, and when the field is missing. */
const expected = (what: string) => ({ error: (iss: { input?: unknown }) => (iss.input === undefined ? `required: ${what}` : `expected ${what}`) });

const stop = z.union([z.string().min(1).max(256), z.array(z.string().min(1).max(256)).max(8)], expected('a non-empty string or an array of at most 8'));
const streamOptions = z.object({ include_usage: z.boolean().nullable().optional(), continuous_usage_stats: z.boolean().nullable().optional() });

/** A token budget: an integer from 1 to the model's context. */
function tokenCount(maxPositions: number) {
  return z.number().int().min(1, { error: 'expected an integer >= 1' })
    .max(maxPositions, { error: `expected at most ${maxPositions}, the model's context length` }).nullable().optional();
}

/** Choices per prompt at most (each is a sequence in the batch). */
export const MAX_N = 16;

const responseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({ name: z.string().max(64).optional(), description: z.string().optional(), schema: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullable().optional() }),
  }),
], expected("{type: 'text' | 'json_object' | 'json_schema', json_schema?: {name, schema}}"));

/** Fields shared by both endpoints; `maxPositions` bounds max_tokens by the model's context. */
function samplingFields(maxPositions: number) {
  return {
    model: z.string().max(256).nullable().optional(),
    max_tokens: tokenCount(maxPositions),
    temperature: z.number().min(0).max(2).nullable().optional(),
    top_p: z.number().gt(0).max(1).nullable().optional(),
    seed: z.number().int().min(0).max(2 ** 32 - 1).nullable().optional(),
    stop: stop.nullable().optional(),
    stream: z.boolean().nullable().optional(),
    stream_options: streamOptions.nullable().optional(),
    n: z.number().int().min(1).max(MAX_N, { error: `expected at most ${MAX_N} choices` }).nullable().optional(),
    user: z.string().max(256).nullable().optional(),
    presence_penalty: z.number().min(-2).max(2).nullable().optional(),
    frequency_penalty: z.number().min(-2).max(2).nullable().optional(),
    response_format: responseFormat.nullable().optional(),
    // vLLM's extensions.
    repetition_penalty: z.number().gt(0).max(10).nullable().optional(),
    top_k: z.number().int().min(-1, { error: 'expected an integer >= -1 (-1 or 0 = off)' }).nullable().optional(),
    min_p: z.number().min(0).max(1).nullable().optional(),
    /** Keep generating past EOS, for benchmarks. */
    ignore_eos: z.boolean().nullable().optional(),
  };
}

const tokenIds = (maxPositions: number) => z.array(z.number().int().min(0)).min(1).max(maxPositions);

export function completionSchema(maxPositions: number) {
  return z.object({
    ...samplingFields(maxPositions),
    // OpenAI's four prompt forms: text, texts, token ids, lists of token ids (one choice set per prompt).
    prompt: z.union([z.string(), z.array(z.string()).min(1).max(MAX_N), tokenIds(maxPositions), z.array(tokenIds(maxPositions)).min(1).max(MAX_N)],
      expected(`a string, an array of strings, an array of token ids or an array of such arrays (at most ${MAX_N} prompts)`)),
    logprobs: z.number().int().min(0).max(20).nullable().optional(),
    echo: z.boolean().nullable().optional(),
    best_of: z.number().int().min(1).nullable().optional(),
    suffix: z.string().nullable().optional(),
  });
}

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const content = z.union([z.string(), z.array(textPart).min(1)], expected('a string or an array of {type: "text", text} parts'));
const toolCall = z.object({ id: z.string().max(256), type: z.literal('function'), function: z.object({ name: z.string().max(256), arguments: z.string() }) });
const message = z.discriminatedUnion('role', [
  z.object({ role: z.enum(['system', 'developer', 'user']), content, name: z.string().max(64).optional() }),
  z.object({ role: z.literal('assistant'), content: content.nullable().optional(), name: z.string().max(64).optional(), tool_calls: z.array(toolCall).max(64).nullable().optional() }),
  z.object({ role: z.literal('tool'), content, tool_call_id: z.string().max(256) }),
], expected("a message with role 'system', 'developer', 'user', 'assistant' or 'tool'"));

const tool = z.object({
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/, { error: 'expected letters, digits, _ or -' }), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullable().optional() }),
});
const toolChoice = z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string() }) })],
  expected("'none', 'auto', 'required' or {type: 'function', function: {name}}"));

export function chatSchema(maxPositions: number) {
  return z.object({
    ...samplingFields(maxPositions),
    messages: z.array(message).min(1).max(1024),
    max_completion_tokens: tokenCount(maxPositions),
    logprobs: z.boolean().nullable().optional(),
    top_logprobs: z.number().int().min(0).max(20).nullable().optional(),
    tools: z.array(tool).max(128).nullable().optional(),
    tool_choice: toolChoice.nullable().optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
  });
}

/** POST /tokenize: a prompt, or messages rendered through the chat template (checked there). */
export const tokenizeSchema = z.union([
  z.object({ model: z.string().nullable().optional(), prompt: z.string(), add_special_tokens: z.boolean().optional() }),
  z.object({ model: z.string().nullable().optional(), messages: z.array(z.unknown()).min(1), add_generation_prompt: z.boolean().optional() }),
], { error: 'expected {prompt: string} or {messages: [...]}' });

/** POST /detokenize: token ids of the vocabulary (`vocabSize` ids). */
export function detokenizeSchema(vocabSize: number) {
  return z.object({ model: z.string().nullable().optional(), tokens: z.array(z.number().int().min(0).max(vocabSize - 1, { error: `expected token ids in 0..${vocabSize - 1}` })).max(1 << 20) });
}

export type CompletionRequest = z.output<ReturnType<typeof completionSchema>>;
export type ChatRequest = z.output<ReturnType<typeof chatSchema>>;
export type ChatMessage = z.output<typeof message>;
export type ChatTool = z.output<typeof tool>;
export type ResponseFormat = z.output<typeof responseFormat>;
