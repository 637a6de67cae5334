// Server-sent events in OpenAI's shape: `data: {json}\n\n` per chunk, then `data: [DONE]`.
// Closing the stream from the client side aborts `cancel`, which cancels the engine's sequence.
import { toApiError } from './api-error.ts';

const encoder = new TextEncoder();

export function sseResponse(chunks: AsyncIterator<unknown>, cancel: AbortController): Response {
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await chunks.next();
        if (done) {
          controller.enqueue(encoder.encode('data: [DONE]\n\n'));
          controller.close();
          return;
        }
        controller.enqueue(encoder.encode(`data: ${JSON.stringify(value)}\n\n`));
      } catch (err) {
        if (cancel.signal.aborted) return; // the client is gone; nobody reads an error event
        // Headers are gone already: the error travels as one last event, as OpenAI's API does.
        controller.enqueue(encoder.encode(`data: ${JSON.stringify(toApiError(err).body())}\n\n`));
        controller.close();
      }
    },
    cancel() {
      cancel.abort();
      chunks.return?.(undefined)?.catch(() => {});
    },
  });
  return new Response(body, {
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' },
  });
}
