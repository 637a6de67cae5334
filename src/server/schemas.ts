// Request schemas for /v1/completions and /v1/chat/completions: strict objects (unknown fields are
// rejected by name), bounded numbers, and the sampling fields the engine supports.
import { z } from 'zod';

/** zod's union messages say only "Invalid input": say what is expected, and when the field is missing. */
const expected = (what: string) => ({ error: (iss: { input?: unknown }) => (iss.input === undefined ? `required: ${what}` : `expected ${what}`) });

const stop = z.union([z.string().min(1).max(256), z.array(z.string().min(1).max(256)).max(8)], expected('a non-empty string or an array of at most 8'));
const streamOptions = z.strictObject({ include_usage: z.boolean().optional() });

/** A token budget: an integer from 1 to the model's context. */
function tokenCount(maxPositions: number) {
  return z.number().int().min(1, { error: 'expected an integer >= 1' })
    .max(maxPositions, { error: `expected at most ${maxPositions}, the model's context length` }).nullable().optional();
}

/** Fields shared by both endpoints; `maxPositions` bounds max_tokens by the model's context. */
function samplingFields(maxPositions: number) {
  return {
    model: z.string().max(256).optional(),
    max_tokens: tokenCount(maxPositions),
    temperature: z.number().min(0).max(2).nullable().optional(),
    top_p: z.number().gt(0).max(1).nullable().optional(),
    seed: z.number().int().min(0).max(2 ** 32 - 1).nullable().optional(),
    stop: stop.nullable().optional(),
    stream: z.boolean().nullable().optional(),
    stream_options: streamOptions.nullable().optional(),
    n: z.literal(1).nullable().optional(),
    user: z.string().max(256).optional(),
    /** Extension (vLLM's spelling): keep generating past EOS, for benchmarks. */
    ignore_eos: z.boolean().optional(),
  };
}

export function completionSchema(maxPositions: number) {
  return z.strictObject({
    ...samplingFields(maxPositions),
    // A prompt is text, or token ids (OpenAI's `[int]` form); one prompt per request (n = 1).
    prompt: z.union([z.string(), z.array(z.number().int().min(0)).min(1).max(maxPositions)], expected('a string or an array of token ids (one prompt per request)')),
  });
}

const textPart = z.strictObject({ type: z.literal('text'), text: z.string() });
const message = z.strictObject({
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([z.string(), z.array(textPart).min(1)], expected('a string or an array of {type: "text", text} parts')),
  name: z.string().max(64).optional(),
});

export function chatSchema(maxPositions: number) {
  return z.strictObject({
    ...samplingFields(maxPositions),
    messages: z.array(message).min(1).max(1024),
    max_completion_tokens: tokenCount(maxPositions),
  });
}

export type CompletionRequest = z.output<ReturnType<typeof completionSchema>>;
export type ChatRequest = z.output<ReturnType<typeof chatSchema>>;
export type ChatMessage = z.output<typeof message>;
