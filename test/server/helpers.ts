// Starting a server on an ephemeral loopback port, and reading its SSE streams, for the tests.
import type { GenerationEngine } from '../../src/engine/types.ts';
import { startServer } from '../../src/server/server.ts';
import type { RunningServer } from '../../src/server/server.ts';
import { defaultServerConfig } from '../../src/server/types.ts';
import type { ResidencyView, ServerConfig, ServerModel } from '../../src/server/types.ts';
import { FakeEngine, FakeResidency, fakeModel } from './fakes.ts';

declare global {
  // Tests read many JSON shapes; undici types json() as unknown, tests assert on fields directly.
  interface Response { json(): Promise<any> }
}

export interface TestServer extends RunningServer { engine: GenerationEngine }

export async function startTestServer(opts: { engine?: GenerationEngine; model?: ServerModel; residency?: ResidencyView | null; config?: Partial<ServerConfig> } = {}): Promise<TestServer> {
  const engine = opts.engine ?? new FakeEngine();
  const residency = opts.residency === null ? undefined : opts.residency ?? new FakeResidency();
  const server = await startServer(
    { engine, model: opts.model ?? fakeModel, ...(residency ? { residency } : {}), config: { ...defaultServerConfig, sampleSeconds: 0.2, ...opts.config } },
    { port: 0, host: '127.0.0.1' },
    { defaultMetrics: false },
  );
  return { ...server, engine };
}

export function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });
}

/** Reads an SSE response to the end: the parsed `data:` payloads, and whether `[DONE]` arrived last. */
export async function readSse(res: Response, onChunk?: (chunk: any, at: number) => void): Promise<{ chunks: any[]; done: boolean }> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const chunks: any[] = [];
  let done = false;
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const c = JSON.parse(data);
        chunks.push(c);
        onChunk?.(c, performance.now());
      }
    }
  }
  return { chunks, done };
}

/** Concatenated text of completion or chat chunks. */
export function sseText(chunks: any[]): string {
  return chunks.flatMap((c) => c.choices ?? []).map((ch: any) => ch.text ?? ch.delta?.content ?? '').join('');
}
