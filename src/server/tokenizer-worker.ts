// The prompt tokenizer's worker thread: loads the checkpoint's tokenizer and encodes texts sent to it, one
// at a time, so a long prompt costs this thread's time, not the step loop's.
import { parentPort, workerData } from 'node:worker_threads';
import { loadTokenizer } from '../model/tokenizer.ts';

export interface TokenizeRequest { readonly id: number; readonly text: string }
export type TokenizeReply = { readonly id: number; readonly ids: Int32Array } | { readonly id: number; readonly error: string };

const port = parentPort!;
try {
  const tokenizer = await loadTokenizer((workerData as { dir: string }).dir);
  port.on('message', ({ id, text }: TokenizeRequest) => {
    try {
      const ids = Int32Array.from(tokenizer.encode(text));
      port.postMessage({ id, ids } satisfies TokenizeReply, [ids.buffer]);
    } catch (err) {
      port.postMessage({ id, error: (err as Error).message } satisfies TokenizeReply);
    }
  });
  port.postMessage({ ready: true });
} catch (err) {
  port.postMessage({ failed: (err as Error).message });
}
