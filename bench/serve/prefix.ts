// `npm run bench:prefix`: prefix caching under a shared system prompt. N streaming requests at once, each a
// shared SYSTEM-token prompt followed by its own QUESTION tokens, served twice in one run: with prefix caching and
// without. Prints TTFT p50 / p99 of both, the speedup, whether every request got the same tokens, the prefix hits;
// writes out/bench-prefix.json. The scale is the default (64 requests, 2,048 + 64 tokens); on the CPU with
// tiny-moe (2,048 positions) run it smaller, e.g.
//   npm run bench:prefix -- --requests 16 --system 512 --question 64
// On a device later: --backend cuda --model DIR (once the cuda backend is paged; until then it has no prefix cache).
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseBackendName } from '../../src/backend/registry.ts';
import { startServing } from '../../src/server/boot.ts';
import { mulberry32 } from '../../src/util/rng.ts';
import { percentile } from './loadgen.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/tiny-moe' },
    backend: { type: 'string', default: 'cpu' },
    requests: { type: 'string', default: '64' },
    system: { type: 'string', default: '2048' },
    question: { type: 'string', default: '64' },
    tokens: { type: 'string', default: '16' },
    threads: { type: 'string' },
    'max-num-batched-tokens': { type: 'string', default: '2048' },
  },
});
const int = (k: keyof typeof values): number => {
  const n = Number(values[k]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${k} ${values[k]}: expected an integer >= 1`);
  return n;
};
const [requests, system, question, tokens, batched] = [int('requests'), int('system'), int('question'), int('tokens'), int('max-num-batched-tokens')];
const backend = parseBackendName(values.backend!);

interface Result { ttftMs: number; text: string; ok: boolean }

/** One streaming completion: time to the first text, and the whole text. */
async function one(url: string, prompt: number[]): Promise<Result> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: tokens, temperature: 0, stream: true, ignore_eos: true }),
  });
  if (!res.ok || !res.body) return { ttftMs: NaN, text: '', ok: false };
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let text = '';
  let ttft = NaN;
  let done = false;
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let at: number;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!line.startsWith('data: ')) continue;
      if (line === 'data: [DONE]') { done = true; continue; }
      const c = (JSON.parse(line.slice(6)) as { choices?: { text?: string }[] }).choices?.[0];
      if (c?.text) {
        if (Number.isNaN(ttft)) ttft = performance.now() - t0;
        text += c.text;
      }
    }
  }
  return { ttftMs: ttft, text, ok: done };
}

const rand = mulberry32(2048);
const serve = async (prefixCaching: boolean) => {
  const s = await startServing({
    modelDir: resolve(values.model!), backend, port: 0, host: '127.0.0.1', log: () => {}, prefixCaching,
    ...(values.threads !== undefined ? { threads: values.threads === 'auto' ? 'auto' as const : Number(values.threads) } : {}),
    config: { maxQueue: requests + 1 }, scheduler: { maxStepTokens: batched },
    // Room for every request whole on the cpu, so neither run preempts (the comparison is of prefill work alone).
    ...(backend === 'cpu' ? { kvCache: { tokens: requests * (system + question + tokens + 16) } } : {}),
  });
  return s;
};

const first = await serve(true);
const vocab = first.model.spec.vocabSize;
if (system + question + tokens > first.model.spec.maxPositions) {
  await first.close();
  throw new Error(`${system} + ${question} + ${tokens} positions are past the model's ${first.model.spec.maxPositions}: lower --system or --question`);
}
const shared = Array.from({ length: system }, () => Math.floor(rand() * vocab));
const prompts = Array.from({ length: requests }, () => [...shared, ...Array.from({ length: question }, () => Math.floor(rand() * vocab))]);

const runs: { caching: boolean; results: Result[]; hits: number; queries: number; wallMs: number; pool: string }[] = [];
for (const caching of [true, false]) {
  const s = caching ? first : await serve(false);
  try {
    const t0 = performance.now();
    const results = await Promise.all(prompts.map((p) => one(s.server.url, p)));
    const kv = s.engine.kvCache;
    runs.push({ caching, results, hits: kv?.prefixHits ?? 0, queries: kv?.prefixQueries ?? 0, wallMs: performance.now() - t0, pool: kv ? `${kv.numBlocks} blocks of ${kv.blockSize}, ${kv.dtype}` : 'not paged' });
  } finally {
    await s.close();
  }
}

const [on, off] = runs as [typeof runs[0], typeof runs[0]];
const ttft = (r: typeof on) => r.results.filter((x) => x.ok).map((x) => x.ttftMs);
const p50 = (r: typeof on) => percentile(ttft(r), 50);
const p99 = (r: typeof on) => percentile(ttft(r), 99);
const same = on.results.filter((r, i) => r.ok && off.results[i]!.ok && r.text === off.results[i]!.text).length;
const failed = runs.reduce((n, r) => n + r.results.filter((x) => !x.ok).length, 0);
const line = (r: typeof on) =>
  `| ${r.caching ? 'on' : 'off'} | ${p50(r).toFixed(1)} | ${p99(r).toFixed(1)} | ${(r.wallMs / 1000).toFixed(2)} | ${r.hits.toLocaleString('en-US')} / ${r.queries.toLocaleString('en-US')} |`;
console.log(`prefix caching: ${requests} requests at once, a shared ${system}-token system prompt + ${question} tokens each, ${tokens} tokens out; ${backend}, ${first.model.spec.name}, ${on.pool}, ${batched} tokens a step`);
console.log('| prefix caching | TTFT p50 ms | TTFT p99 ms | wall s | prompt tokens hit / looked up |');
console.log('|---|---|---|---|---|');
console.log(line(on));
console.log(line(off));
console.log(`TTFT p50 ${(p50(off) / p50(on)).toFixed(1)}x lower with caching; same tokens: ${same}/${requests} requests; failed: ${failed}`);
mkdirSync('out', { recursive: true });
writeFileSync('out/bench-prefix.json', `${JSON.stringify({
  when: new Date().toISOString(), backend, model: first.model.spec.name, requests, system, question, tokens, batched,
  runs: runs.map((r) => ({ caching: r.caching, ttft_ms: { p50: p50(r), p99: p99(r) }, wall_s: r.wallMs / 1000, prefix_hits: r.hits, prefix_queries: r.queries, pool: r.pool })),
  speedup_p50: p50(off) / p50(on), same_tokens: same, failed, node: process.version,
}, null, 2)}\n`);
console.log('wrote out/bench-prefix.json');
if (same !== requests || failed > 0) process.exitCode = 1;
