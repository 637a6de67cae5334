// The body checker's worker thread: checks large request bodies (body-check.ts), so parsing a megabyte of
// JSON costs this thread's time, not the step loop's.
import { parentPort } from 'node:worker_threads';
import { checkBody, type BodyCheck, type BodySchema } from './body-check.ts';

export interface BodyCheckRequest { readonly id: number; readonly bytes: Uint8Array; readonly schema: BodySchema }
export interface BodyCheckReply { readonly id: number; readonly result: BodyCheck }

const port = parentPort!;
port.on('message', ({ id, bytes, schema }: BodyCheckRequest) => {
  let result: BodyCheck;
  try {
    result = checkBody(bytes, schema);
  } catch (err) {
    result = { ok: false, error: { status: 400, message: `request body could not be checked: ${(err as Error).message}`, code: 'invalid_json', param: null } };
  }
  port.postMessage({ id, result } satisfies BodyCheckReply);
});
port.postMessage({ ready: true });
