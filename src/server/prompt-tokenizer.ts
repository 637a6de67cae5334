// Prompt text -> token ids without freezing other streams: the step loop and every stream's relay run on
// the main thread, and a long prompt holds that thread for a long time (docs/results.md, "Sampling, loading,
// server"). Short prompts are encoded inline; longer ones in a worker thread holding its own copy of the tokenizer.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ApiError } from './api-error.ts';
import type { ServerConfig, ServerTokenizer } from './types.ts';
import type { TokenizeReply } from './tokenizer-worker.ts';

/** Prompts up to this many characters are encoded inline (well under a millisecond of main-thread time). */
export const INLINE_PROMPT_CHARS = 1024;

/** The bundle's worker file name (scripts/build.mjs: src/server/tokenizer-worker.ts -> dist/tokenizer-worker.mjs). */
const BUNDLED_WORKER = 'tokenizer-worker.mjs';

/**
 * A prompt can hold at most the context's tokens, and no token of a real vocabulary is longer than a few
 * dozen characters (tiny-moe's longest: 96 byte-level characters, 32 real ones), so a prompt longer than
 * this per context token cannot fit and is refused without tokenizing it.
 */
export const PROMPT_CHARS_PER_TOKEN = 32;

/** Refuses, before any tokenizing, a prompt of more characters than can fit in the context. */
export function checkPromptChars(chars: number, maxPositions: number, config: Pick<ServerConfig, 'maxPromptChars'>, param: string): void {
  const max = config.maxPromptChars ?? PROMPT_CHARS_PER_TOKEN * maxPositions;
  if (chars > max) {
    throw new ApiError(400, `${param} is ${chars} characters; at most ${max} are accepted for the model's context of ${maxPositions} tokens: shorten the prompt`,
      { param, code: 'context_length_exceeded' });
  }
}

/** Encodes a prompt, off the main thread when the tokenizer can and the text is long. */
export function encodePrompt(tokenizer: ServerTokenizer, text: string): Promise<number[]> | number[] {
  if (text.length <= INLINE_PROMPT_CHARS || !tokenizer.encodeAsync) return tokenizer.encode(text);
  return tokenizer.encodeAsync(text);
}

/**
 * One worker thread with the tokenizer of `dir`, started on the first long prompt; requests queue in
 * it and are answered in order. If it cannot start (a bundle without its worker file) or dies, long
 * prompts are encoded inline, as before, and that is said once through `log`.
 */
export class OffThreadEncoder {
  private worker: Worker | null = null;
  private broken = false;
  private next = 0;
  private readonly pending = new Map<number, { resolve: (ids: number[]) => void; reject: (err: Error) => void; text: string }>();

  constructor(
    private readonly dir: string,
    private readonly inline: ServerTokenizer,
    private readonly log: (message: string) => void = () => {},
  ) {}

  /** `inline` with encodeAsync added (the shape the server's model takes). */
  tokenizer(): ServerTokenizer {
    const t = this.inline;
    return { encode: (s) => t.encode(s), decode: (ids) => t.decode(ids), ...(t.isSpecial ? { isSpecial: (id: number) => t.isSpecial!(id) } : {}), eosTokenIds: t.eosTokenIds, vocabSize: t.vocabSize, encodeAsync: (s) => this.encode(s) };
  }

  encode(text: string): Promise<number[]> {
    const worker = this.start();
    if (!worker) return Promise.resolve(this.inline.encode(text));
    const id = this.next++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) worker.ref(); // held while answers are owed
      this.pending.set(id, { resolve, reject, text });
      worker.postMessage({ id, text });
    });
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    this.broken = true;
    if (w) await w.terminate();
  }

  private start(): Worker | null {
    if (this.worker || this.broken) return this.worker;
    const here = import.meta.url;
    const fromSources = here.endsWith('.ts');
    const url = fromSources ? new URL('./tokenizer-worker-boot.mjs', here) : new URL(`./${BUNDLED_WORKER}`, here);
    if (!existsSync(fileURLToPath(url))) return this.fail(`${fileURLToPath(url)} is missing`);
    const entry = fromSources ? new URL('./tokenizer-worker.ts', here).href : url.href;
    const w = new Worker(url, { workerData: { dir: this.dir, entry }, name: 'residency-tokenizer' });
    w.on('message', (m: TokenizeReply | { ready: true } | { failed: string }) => {
      if ('failed' in m) return this.fail(m.failed);
      if (!('id' in m)) return;
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (this.pending.size === 0) w.unref();
      if ('error' in m) p.reject(new Error(m.error));
      else p.resolve(Array.from(m.ids));
    });
    w.on('error', (err) => this.fail(err.message));
    w.on('exit', (code) => { if (this.worker === w) this.fail(`exited with code ${code}`); });
    // Idle, it never keeps the process alive (after the listeners: adding a 'message' listener refs a worker again).
    w.unref();
    this.worker = w;
    return w;
  }

  /** Gives up on the worker: what it still owed is encoded inline. */
  private fail(why: string): null {
    if (!this.broken) this.log(`tokenizer worker unavailable, long prompts are tokenized on the main thread: ${why}`);
    this.broken = true;
    const w = this.worker;
    this.worker = null;
    void w?.terminate();
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      try { p.resolve(this.inline.encode(p.text)); } catch (err) { p.reject(err as Error); }
    }
    return null;
  }
}
