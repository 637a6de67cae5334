// `npm run bench:serve`: concurrent streaming clients against the server on loopback (the real engine on
// tiny-moe, CPU, started in this process, or --url for a running server). Prints TTFT and inter-token
// percentiles per round and writes out/bench-serve.json.
//   npm run bench:serve -- [--clients 64] [--tokens 32] [--rounds 3] [--hot 49] [--backend cpu|cuda] [--url http://host:port]
// With --check-greedy N, first checks that N greedy completions over HTTP equal the CPU backend's greedy
// tokens (a no-engine reference loop), e.g. to confirm the cuda backend serves the same text.
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createCpuBackend } from '../../src/backend/cpu/cpu-backend.ts';
import { parseBackendName } from '../../src/backend/registry.ts';
import { generateGreedy } from '../../src/engine/complete.ts';
import { startServing, type Serving } from '../../src/server/boot.ts';
import { formatReport, runLoad, type LoadReport } from './loadgen.ts';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '64' },
    tokens: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '3' },
    hot: { type: 'string', default: '49' },
    'max-running': { type: 'string', default: '8' },
    url: { type: 'string' },
    backend: { type: 'string', default: 'cpu' },
    'check-greedy': { type: 'string', default: '0' },
    'api-key': { type: 'string' },
  },
});
const clients = Number(values.clients);
const tokens = Number(values.tokens);
const rounds = Number(values.rounds);
const prompts = ['The ls command', 'Die Datei wird', 'def parse(args):', 'const x = require(', 'La commande', 'ファイルを', 'El programa', 'Команда'];

let serving: Serving | undefined;
let url = values.url;
if (!url) {
  serving = await startServing({
    modelDir: resolve('models/tiny-moe'), backend: parseBackendName(values.backend), hot: Number(values.hot), adapt: true, port: 0, host: '127.0.0.1',
    log: () => {}, config: { maxQueue: Math.max(64, clients) }, scheduler: { maxRunning: Number(values['max-running']) },
  });
  url = serving.server.url;
}
const checks = Number(values['check-greedy']);
let greedyMatches = 0;
if (checks > 0 && serving) {
  const { model } = serving;
  const ref = createCpuBackend(model.spec, model.weights);
  for (let i = 0; i < checks; i++) {
    const prompt = prompts[i % prompts.length]!;
    const want = model.tokenizer.decode(generateGreedy(ref, model.tokenizer.encode(prompt), 32).filter((t) => !model.tokenizer.eosTokenIds.includes(t)));
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt, max_tokens: 32, temperature: 0, ignore_eos: true }) });
    const got = ((await res.json()) as { choices: { text: string }[] }).choices[0]!.text;
    if (got === want) greedyMatches++;
    else console.log(`greedy mismatch on ${JSON.stringify(prompt)}:\n  cpu ref: ${JSON.stringify(want)}\n  served:  ${JSON.stringify(got)}`);
  }
  ref.dispose();
  console.log(`greedy check (${values.backend} over HTTP vs CPU reference, 32 tokens): ${greedyMatches}/${checks} identical`);
}
const reports: LoadReport[] = [];
for (let r = 0; r < rounds; r++) {
  const { report } = await runLoad({ url, clients, maxTokens: tokens, prompts, apiKey: values['api-key'] });
  reports.push(report);
  (globalThis as { gc?: () => void }).gc?.(); // heap after GC (the npm script passes --expose-gc)
  const heap = (process.memoryUsage().heapUsed / 2 ** 20).toFixed(1);
  console.log(`round ${r}: ${formatReport(report)}; heap ${heap} MiB`);
}
mkdirSync('out', { recursive: true });
const result = { when: new Date().toISOString(), url, backend: values.backend, greedy: checks > 0 ? { checks, matches: greedyMatches } : undefined, clients, tokens, rounds, max_running: Number(values['max-running']), node: process.version, reports };
writeFileSync('out/bench-serve.json', `${JSON.stringify(result, null, 2)}\n`);
console.log('wrote out/bench-serve.json');
await serving?.close();
