// Request schemas for /v1/completions and /v1/chat/completions: strict objects (unknown fields are
// rejected by name), bounded numbers, and the sampling fields the engine supports.
import { z } from 'zod';

const stop = z.union([z.string().min(1).max(256), z.array(z.string().min(1).max(256)).max(8)]);
const streamOptions = z.strictObject({ include_usage: z.boolean().optional() });

/** Fields shared by both endpoints; `maxPositions` bounds max_tokens by the model's context. */
function samplingFields(maxPositions: number) {
  return {
    model: z.string().max(256).optional(),
    max_tokens: z.number().int().min(1).max(maxPositions).nullable().optional(),
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
    prompt: z.union([z.string(), z.array(z.number().int().min(0)).min(1).max(maxPositions)]),
  });
}

const textPart = z.strictObject({ type: z.literal('text'), text: z.string() });
const message = z.strictObject({
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([z.string(), z.array(textPart).min(1)]),
  name: z.string().max(64).optional(),
});

export function chatSchema(maxPositions: number) {
  return z.strictObject({
    ...samplingFields(maxPositions),
    messages: z.array(message).min(1).max(1024),
    max_completion_tokens: z.number().int().min(1).max(maxPositions).nullable().optional(),
  });
}

export type CompletionRequest = z.output<ReturnType<typeof completionSchema>>;
export type ChatRequest = z.output<ReturnType<typeof chatSchema>>;
export type ChatMessage = z.output<typeof message>;
