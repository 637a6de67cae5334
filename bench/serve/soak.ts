// `node --import tsx bench/serve/soak.ts --minutes 20`: a bounded soak of the served tiny model (CPU, in this
// process) with the residency controller adapting: streaming clients whose prompts shift domain every
// phase, a share of clients aborting mid-stream, a restore_map + restart-adaptation cycle every --restore-every
// seconds. Reports inter-token p50/p99 from the step ring (steps.json), swaps applied / stale / failed, RSS
// over time, and whether anything was lost (every stream ended in [DONE] or was aborted by its client, no 5xx,
// every telemetry line parses). Writes out/soak.json.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startServing } from '../../src/server/boot.ts';
import { readLiveRun } from '../../src/sim/analyze.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '20' },
    clients: { type: 'string', default: '8' },
    hot: { type: 'string', default: '49' },
    'abort-share': { type: 'string', default: '0.2' },
    'restore-every': { type: 'string', default: '60' },
    'phase-seconds': { type: 'string', default: '30' },
  },
});
const minutes = Number(values.minutes);
const clients = Number(values.clients);
const abortShare = Number(values['abort-share']);
const restoreEvery = Number(values['restore-every']) * 1000;
const phaseMs = Number(values['phase-seconds']) * 1000;
if (!(minutes > 0 && minutes <= 120) || !(clients >= 1 && clients <= 256)) throw new Error('--minutes 0..120 and --clients 1..256');

const domains = [
  ['The ls command', 'def parse(args):', 'const x = require(', 'SELECT name FROM'],
  ['Die Datei wird', 'ファイルを', 'Der Befehl', '日本語の文章は'],
];
const dir = mkdtempSync(join(tmpdir(), 'soak-'));
const engineErrors: string[] = [];
const serving = await startServing({
  modelDir: resolve('models/tiny-moe'), backend: 'cpu', hot: Number(values.hot), adapt: true, residencyDir: dir, port: 0, host: '127.0.0.1',
  log: (m) => { if (m.startsWith('engine:')) engineErrors.push(m); }, config: { maxQueue: Math.max(64, clients) }, scheduler: { maxRunning: 8 },
});
const url = serving.server.url;
const t0 = performance.now();
const end = t0 + minutes * 60_000;
const stats = { requests: 0, done: 0, aborted: 0, status5xx: 0, status4xx: 0, torn: 0, tokens: 0 };
const gaps: number[] = [];
const rss: { s: number; mib: number }[] = [];

let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);

async function oneRequest(): Promise<void> {
  const phase = Math.floor((performance.now() - t0) / phaseMs) % domains.length;
  const prompts = domains[phase]!;
  const abortAfter = rand() < abortShare ? 1 + Math.floor(rand() * 20) : Infinity;
  const ac = new AbortController();
  stats.requests++;
  let res: Response;
  try {
    res = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ prompt: prompts[Math.floor(rand() * prompts.length)], max_tokens: 16 + Math.floor(rand() * 112), temperature: 0.8, seed: Math.floor(rand() * 1e6), stream: true, ignore_eos: true }),
    });
  } catch {
    return;
  }
  if (res.status >= 500) { stats.status5xx++; return; }
  if (res.status >= 400) { stats.status4xx++; await res.text(); return; }
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let last = NaN;
  let n = 0;
  let sawDone = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (ev === 'data: [DONE]') { sawDone = true; continue; }
        const j = JSON.parse(ev.slice(6)) as { error?: unknown };
        if (j.error) { stats.status5xx++; continue; }
        const now = performance.now();
        if (!Number.isNaN(last)) gaps.push(now - last);
        last = now;
        n++;
        stats.tokens++;
        if (n >= abortAfter) { ac.abort(); stats.aborted++; return; }
      }
    }
  } catch {
    if (ac.signal.aborted) return;
  }
  if (sawDone) stats.done++;
  else stats.torn++;
}

async function client(): Promise<void> {
  while (performance.now() < end) await oneRequest();
}

const control = (body: unknown) => fetch(`${url}/v1/residency/control`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
let restores = 0;
const restoreTimer = setInterval(async () => {
  restores++;
  await control({ restore_map: true });
  setTimeout(() => { void control({ freeze: false, baseline: true }); }, 5000).unref();
}, restoreEvery);
const sampleRss = () => rss.push({ s: Math.round((performance.now() - t0) / 1000), mib: Math.round(process.memoryUsage().rss / 2 ** 20) });
sampleRss();
const rssTimer = setInterval(sampleRss, 10_000);

await Promise.all(Array.from({ length: clients }, client));
clearInterval(restoreTimer);
clearInterval(rssTimer);
sampleRss();
const ctl = serving.driver!.controller.stats;
const shutdown = await serving.shutdown(5000);

const q = (xs: number[], p: number) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))]! : NaN; };
const ring = JSON.parse(readFileSync(join(dir, 'steps.json'), 'utf8')) as { t_ns: number[]; swap_ns: number[]; swaps: number[]; recorded: number };
const stepMs = ring.t_ns.map((t, i) => (t + ring.swap_ns[i]!) / 1e6);
const live = readLiveRun(dir); // throws if any telemetry line does not parse
const result = {
  minutes, clients, abort_share: abortShare, restores,
  requests: stats.requests, completed: stats.done, aborted_by_client: stats.aborted, torn_streams: stats.torn, status_5xx: stats.status5xx, status_4xx: stats.status4xx,
  tokens: stats.tokens,
  step_ring: { steps: ring.recorded, kept: stepMs.length, p50_ms: q(stepMs, 0.5), p99_ms: q(stepMs, 0.99), p99_with_swaps_ms: q(stepMs.filter((_, i) => ring.swaps[i]! > 0), 0.99) },
  client_inter_token_ms: { p50: q(gaps, 0.5), p99: q(gaps, 0.99), max: Math.max(...gaps) },
  swaps: { applied: ctl.applied, stale: ctl.refused, cancelled: ctl.cancelled, failed: engineErrors.length },
  telemetry: { drains: live.drains.length, swap_lines: live.swaps.length, runs: live.runs },
  rss_mib: rss, shutdown,
};
mkdirSync('out', { recursive: true });
writeFileSync('out/soak.json', `${JSON.stringify(result, null, 1)}\n`);
rmSync(dir, { recursive: true, force: true });
const f = (x: number) => x.toFixed(2);
console.log(`soak ${minutes} min, ${clients} clients (${abortShare * 100}% abort), ${restores} restores`);
console.log(`requests ${result.requests}: completed ${result.completed}, aborted by client ${result.aborted_by_client}, torn ${result.torn_streams}, 5xx ${result.status_5xx}, 4xx ${result.status_4xx}; tokens ${result.tokens}`);
console.log(`step ring (${result.step_ring.kept} of ${result.step_ring.steps} steps): p50 ${f(result.step_ring.p50_ms)} ms, p99 ${f(result.step_ring.p99_ms)} ms, p99 of swap steps ${f(result.step_ring.p99_with_swaps_ms)} ms`);
console.log(`client inter-token: p50 ${f(result.client_inter_token_ms.p50)} ms, p99 ${f(result.client_inter_token_ms.p99)} ms, max ${f(result.client_inter_token_ms.max)} ms`);
console.log(`swaps applied ${ctl.applied}, stale ${ctl.refused}, cancelled ${ctl.cancelled}, failed ${engineErrors.length}; telemetry ${live.drains.length} drains, ${live.swaps.length} swap lines, all parse`);
console.log(`RSS MiB: ${rss.map((r) => `${r.s}s:${r.mib}`).join(' ')}`);
process.exit(result.torn_streams === 0 && result.status_5xx === 0 && engineErrors.length === 0 ? 0 : 1);
