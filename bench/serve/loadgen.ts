// A load generator for the server: N concurrent streaming clients on loopback, each timing its time to
// first token and the gaps between tokens (as a client sees them: SSE chunks as they arrive).

export interface LoadOptions {
  readonly url: string;
  readonly clients: number;
  readonly maxTokens: number;
  readonly prompts: readonly string[];
  readonly apiKey?: string;
  /** Keep generating past EOS so every client gets maxTokens (stable counts). Default true. */
  readonly ignoreEos?: boolean;
}

export interface ClientResult {
  readonly ok: boolean;
  readonly status: number;
  readonly tokens: number;
  readonly ttftMs: number;
  readonly gapsMs: readonly number[];
  readonly finishReason: string | null;
  readonly sawDone: boolean;
  readonly error?: string;
}

export interface LoadReport {
  readonly clients: number;
  readonly completed: number;
  readonly failed: number;
  readonly tokens: number;
  readonly wallMs: number;
  readonly tokensPerSecond: number;
  readonly ttftMs: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly interTokenMs: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly statuses: Readonly<Record<string, number>>;
}

export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

async function oneClient(opts: LoadOptions, i: number): Promise<ClientResult> {
  const t0 = performance.now();
  let res: Response;
  try {
    res = await fetch(`${opts.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}) },
      body: JSON.stringify({ prompt: opts.prompts[i % opts.prompts.length], max_tokens: opts.maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true }, ignore_eos: opts.ignoreEos ?? true }),
    });
  } catch (e) {
    return { ok: false, status: 0, tokens: 0, ttftMs: NaN, gapsMs: [], finishReason: null, sawDone: false, error: String(e) };
  }
  if (!res.ok || !res.body) return { ok: false, status: res.status, tokens: 0, ttftMs: NaN, gapsMs: [], finishReason: null, sawDone: false, error: await res.text() };
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let first = NaN;
  let last = NaN;
  const gaps: number[] = [];
  let tokens = 0;
  let finish: string | null = null;
  let done = false;
  let error: string | undefined;
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let at: number;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const chunk = JSON.parse(data) as { choices?: { text?: string; finish_reason?: string | null }[]; usage?: { completion_tokens: number }; error?: { message: string } };
      if (chunk.error) error = chunk.error.message;
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const c = chunk.choices?.[0];
      if (c?.finish_reason) finish = c.finish_reason;
      if (c?.text) {
        const now = performance.now();
        if (Number.isNaN(first)) first = now - t0;
        else gaps.push(now - last);
        last = now;
      }
    }
  }
  return { ok: done && !error && finish !== null, status: res.status, tokens, ttftMs: first, gapsMs: gaps, finishReason: finish, sawDone: done, ...(error ? { error } : {}) };
}

/** Runs every client at once; resolves when all have finished (or failed). */
export async function runLoad(opts: LoadOptions): Promise<{ report: LoadReport; results: ClientResult[] }> {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: opts.clients }, (_, i) => oneClient(opts, i)));
  const wallMs = performance.now() - t0;
  const ttft = results.filter((r) => r.ok).map((r) => r.ttftMs);
  const gaps = results.flatMap((r) => r.gapsMs);
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const statuses: Record<string, number> = {};
  for (const r of results) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  const stat = (xs: number[]) => ({ p50: percentile(xs, 50), p99: percentile(xs, 99), max: xs.length ? Math.max(...xs) : NaN });
  return {
    results,
    report: {
      clients: opts.clients,
      completed: results.filter((r) => r.ok).length,
      failed: results.filter((r) => !r.ok).length,
      tokens, wallMs, tokensPerSecond: tokens / (wallMs / 1000),
      ttftMs: stat(ttft), interTokenMs: stat(gaps), statuses,
    },
  };
}

export function formatReport(r: LoadReport): string {
  const f = (x: number) => x.toFixed(2);
  return `${r.clients} streaming clients: ${r.completed} completed, ${r.failed} failed, ${r.tokens} tokens in ${f(r.wallMs)} ms ` +
    `(${r.tokensPerSecond.toFixed(1)} tok/s); TTFT p50 ${f(r.ttftMs.p50)} ms p99 ${f(r.ttftMs.p99)} ms; ` +
    `inter-token p50 ${f(r.interTokenMs.p50)} ms p99 ${f(r.interTokenMs.p99)} ms`;
}
