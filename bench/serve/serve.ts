// `npm run bench:serve`: concurrent streaming clients against the server on loopback (the real engine on
// tiny-moe, CPU, started in this process, or --url for a running server). Prints TTFT and inter-token
// percentiles per round and writes out/bench-serve.json.
//   npm run bench:serve -- [--clients 64] [--tokens 32] [--rounds 3] [--hot 49] [--url http://host:port]
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
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
    modelDir: resolve('models/tiny-moe'), backend: 'cpu', hot: Number(values.hot), adapt: true, port: 0, host: '127.0.0.1',
    log: () => {}, config: { maxQueue: Math.max(64, clients) }, scheduler: { maxRunning: Number(values['max-running']) },
  });
  url = serving.server.url;
}
const reports: LoadReport[] = [];
for (let r = 0; r < rounds; r++) {
  const { report } = await runLoad({ url, clients, maxTokens: tokens, prompts, apiKey: values['api-key'] });
  reports.push(report);
  const heap = (process.memoryUsage().heapUsed / 2 ** 20).toFixed(1);
  console.log(`round ${r}: ${formatReport(report)}; heap ${heap} MiB`);
}
mkdirSync('out', { recursive: true });
const result = { when: new Date().toISOString(), url, clients, tokens, rounds, max_running: Number(values['max-running']), node: process.version, reports };
writeFileSync('out/bench-serve.json', `${JSON.stringify(result, null, 2)}\n`);
console.log('wrote out/bench-serve.json');
await serving?.close();
