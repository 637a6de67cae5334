// `npm run soak [-- --minutes 10]`: the served tiny model (CPU, `residency serve` as a child process on loopback)
// under mixed traffic while the controller adapts, with SIGKILLs and restarts, restore/adapt cycles and, when run
// as root, a disk-full episode (the residency folder on a small tmpfs, filled for a while). Prints what was lost;
// the run passes when that is nothing but the requests in flight at a kill: every other request answered as it
// should, every restart resumed the map where the killed run's record ends, and the record reads whole.
//   --minutes M (default 1), --clients N (8), --kill-every S (default: about 4 kills a run, at least 20 s apart)
import { execFileSync, spawn, type ChildProcessByStdio } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { resumeMap } from '../../src/residency/map-file.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';
import { readLiveRun, replaySwaps } from '../../src/sim/analyze.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '1' },
    clients: { type: 'string', default: '8' },
    'kill-every': { type: 'string' },
    seed: { type: 'string', default: '46' },
  },
});
const minutes = Number(values.minutes);
const clients = Number(values.clients);
if (!(minutes > 0 && minutes <= 120) || !(Number.isInteger(clients) && clients >= 1 && clients <= 128)) throw new Error('--minutes in (0, 120], --clients 1..128');
const durationMs = minutes * 60_000;
const killEveryMs = values['kill-every'] !== undefined ? Number(values['kill-every']) * 1000 : Math.max(20_000, durationMs / 5);

let seed = Number(values.seed) >>> 0;
const rand = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

// ---- The residency folder: on a small tmpfs when root, so a disk can be filled; else a plain folder. ----
const root = mkdtempSync(join(tmpdir(), 'restart-soak-'));
const mount = join(root, 'fs');
mkdirSync(mount);
let diskFull: string;
if (process.getuid?.() !== 0) diskFull = 'skipped: not root (mount -t tmpfs needs it)';
else {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', mount], { stdio: 'ignore' });
    diskFull = 'planned';
  } catch (err) {
    diskFull = `skipped: mount -t tmpfs failed (${(err as Error).message.split('\n')[0]})`;
  }
}
const dir = join(mount, 'rd');
const serverLog = join(root, 'server.log');

// ---- The server: a child process, killed and started again. ----
let server: { child: ChildProcessByStdio<null, null, Readable>; url: string; pid: number } | null = null;
let serverUp = false;
const serverEvents: string[] = [];

async function startServer(first: boolean): Promise<{ url: string; mapLine: string; bootMs: number }> {
  const t0 = performance.now();
  const args = ['bin/residency.js', 'serve', '--port', '0', '--host', '127.0.0.1', '--residency-dir', dir, '--adapt', '--max-running', '8', '--max-queue', '256',
    '--shutdown-timeout', '5', '--no-access-log', ...(first ? ['--hot', '49'] : [])];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const url = await new Promise<string>((res, rej) => {
    child.stderr.setEncoding('utf8').on('data', (s: string) => {
      appendFileSync(serverLog, s);
      if (!serverUp) stderr += s;
      const m = /serving \S+ on (http:\/\/\S+)/.exec(stderr);
      if (m && !serverUp) { serverUp = true; res(m[1]!); }
    });
    child.once('exit', (code) => { if (!serverUp) rej(new Error(`serve exited (${code}) before serving:\n${stderr}`)); });
  });
  server = { child, url, pid: child.pid! };
  return { url, mapLine: /^map: (.*)$/m.exec(stderr)?.[1] ?? '?', bootMs: performance.now() - t0 };
}

// ---- Traffic: what each request was, when it ran, how it ended. ----
type Outcome = 'ok' | 'aborted' | 'refused-as-expected' | 'not-accepted' | 'status-5xx' | 'torn' | 'error' | 'unexpected-4xx';
interface Done { readonly kind: string; readonly start: number; readonly end: number; readonly outcome: Outcome; readonly detail?: string }
const done: Done[] = [];
const kills: number[] = [];
let stopping = false;

const phases = [
  ['The ls command', 'def parse(args):', 'const x = require(', 'SELECT name FROM'],
  ['Die Datei wird', 'ファイルを', 'Der Befehl', '日本語の文章は'],
];
const t0 = performance.now();
const promptNow = () => pick(phases[Math.floor((performance.now() - t0) / 30_000) % phases.length]!);
const deepBody = `{"prompt":"hi","max_tokens":1,"x":${'['.repeat(50_000)}${']'.repeat(50_000)}}`;

async function readStream(res: Response, abortAfter: number, ac: AbortController): Promise<[Outcome, string?]> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let n = 0;
  for (;;) {
    const { done: end, value } = await reader.read();
    if (end) return ['torn', buf.slice(-200)];
    buf += dec.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (ev === 'data: [DONE]') return ['ok'];
      const data = JSON.parse(ev.slice(6)) as { error?: { message?: string } };
      if (data.error) return ['status-5xx', data.error.message];
      if (++n >= abortAfter) { ac.abort(); return ['aborted']; }
    }
  }
}

async function oneRequest(): Promise<void> {
  const url = server?.url;
  const r = rand();
  const kind = r < 0.45 ? 'completion-stream' : r < 0.6 ? 'completion' : r < 0.75 ? 'chat-stream' : r < 0.85 ? 'chat' : r < 0.9 ? 'get' : r < 0.95 ? 'bad-input' : 'control';
  const start = performance.now();
  const finish = (outcome: Outcome, detail?: string): void => { done.push({ kind, start, end: performance.now(), outcome, ...(detail ? { detail } : {}) }); };
  if (!url || !serverUp) { finish('not-accepted'); await new Promise((res) => setTimeout(res, 50)); return; }
  const ac = new AbortController();
  const post = (path: string, body: unknown) => fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body), signal: ac.signal });
  const sampling = rand() < 0.5 ? { temperature: 0 } : { temperature: 0.8, seed: Math.floor(rand() * 1e6) };
  const maxTokens = 16 + Math.floor(rand() * 80);
  const abortAfter = rand() < 0.1 ? 1 + Math.floor(rand() * 10) : Infinity;
  try {
    let res: Response;
    if (kind === 'completion-stream' || kind === 'completion') {
      res = await post('/v1/completions', { prompt: promptNow(), max_tokens: maxTokens, ignore_eos: true, stream: kind === 'completion-stream', ...sampling });
    } else if (kind === 'chat-stream' || kind === 'chat') {
      res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: promptNow() }], max_tokens: maxTokens, stream: kind === 'chat-stream', ...sampling });
    } else if (kind === 'get') {
      res = await fetch(`${url}${pick(['/health', '/metrics', '/v1/residency', '/v1/models'])}`, { signal: ac.signal });
    } else if (kind === 'bad-input') {
      const bad = pick([deepBody, '{"prompt": "x",', JSON.stringify({ prompt: 'x', model: 'no-such-model' }), JSON.stringify({ prompt: 'x', max_tokens: -1 })]);
      res = await post('/v1/completions', bad);
      await res.text();
      return finish(res.status >= 400 && res.status < 500 ? 'refused-as-expected' : res.status >= 500 ? 'status-5xx' : 'error', `status ${res.status}`);
    } else {
      res = await post('/v1/residency/control', pick([{ restore_map: true }, { freeze: false, baseline: true }, { dump_counts: 'soak-counts.json' }, { freeze: false }]));
    }
    if (res.status >= 500) { await res.text(); return finish('status-5xx', `status ${res.status}`); }
    if (res.status >= 400) {
      const t = await res.text();
      // A dump_counts the full disk cannot take is refused, as it should be.
      if (kind === 'control' && /cannot write/.test(t)) return finish('refused-as-expected', t.slice(0, 160));
      return finish('unexpected-4xx', `${res.status} ${t.slice(0, 160)}`);
    }
    if (kind.endsWith('-stream')) return finish(...(await readStream(res, abortAfter, ac)));
    await res.arrayBuffer();
    return finish('ok');
  } catch (err) {
    if (ac.signal.aborted) return finish('aborted');
    const code = (err as { cause?: { code?: string } }).cause?.code ?? '';
    // Refused at connect while the server is down: never accepted (the client would try again).
    if (code === 'ECONNREFUSED') { finish('not-accepted'); await new Promise((res) => setTimeout(res, 50)); return; }
    return finish('error', `${(err as Error).message}${code ? ` (${code})` : ''}`);
  }
}

async function client(): Promise<void> {
  while (!stopping) await oneRequest();
}

// ---- Checks of the residency folder, at every kill and at the end. ----
interface FolderCheck { readonly when: string; readonly mapLoads: boolean; readonly broken: number; readonly replayConsistent: boolean; readonly expected?: RowMap; readonly problem?: string }
const checks: FolderCheck[] = [];
function checkFolder(when: string): FolderCheck {
  try {
    const resume = resumeMap(dir);
    const live = readLiveRun(dir);
    const replay = replaySwaps(dir);
    const c: FolderCheck = { when, mapLoads: resume !== null, broken: live.broken.length, replayConsistent: replay.inconsistent === 0 && replay.broken === 0, ...(resume ? { expected: resume.map } : {}) };
    checks.push(c);
    return c;
  } catch (err) {
    const c: FolderCheck = { when, mapLoads: false, broken: -1, replayConsistent: false, problem: (err as Error).message };
    checks.push(c);
    return c;
  }
}

const sameMap = (a: RowMap | undefined, b: RowMap | undefined) => JSON.stringify(a?.layers_map) === JSON.stringify(b?.layers_map);
const resumes: { expectedEqual: boolean; mapLine: string; bootMs: number }[] = [];

async function killAndRestart(): Promise<void> {
  const s = server!;
  serverUp = false;
  kills.push(performance.now());
  s.child.kill('SIGKILL');
  await new Promise((res) => s.child.once('exit', res));
  const c = checkFolder(`after kill ${kills.length}`);
  const started = await startServer(false);
  const live = (await (await fetch(`${started.url}/v1/residency`)).json()) as { map: RowMap };
  resumes.push({ expectedEqual: sameMap(live.map, c.expected), mapLine: started.mapLine, bootMs: started.bootMs });
}

let dropped = { telemetry: 0, swaps: 0 };
async function diskFullEpisode(seconds: number): Promise<void> {
  const filler = join(mount, 'filler');
  const fd = openSync(filler, 'a');
  for (const chunk of [Buffer.alloc(65536), Buffer.alloc(1)]) for (;;) { try { writeSync(fd, chunk); } catch { break; } }
  closeSync(fd);
  serverEvents.push(`disk full at ${((performance.now() - t0) / 1000).toFixed(0)} s for ${seconds} s`);
  await new Promise((res) => setTimeout(res, seconds * 1000));
  try {
    const text = await (await fetch(`${server!.url}/metrics`)).text();
    const n = (file: string) => Number(new RegExp(`^residency_telemetry_lines_dropped_total\\{[^}]*file="${file}"[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    dropped = { telemetry: n('telemetry.jsonl'), swaps: n('swaps.jsonl') };
  } catch { /* a kill got there first */ }
  rmSync(filler);
}

const rss: number[] = [];
const sampleRss = () => {
  try { rss.push(Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server!.pid}/status`, 'utf8'))![1]) / 1024)); } catch { /* between servers */ }
};

// ---- The run. ----
console.log(`soak: ${minutes} min, ${clients} clients, a kill about every ${(killEveryMs / 1000).toFixed(0)} s; residency folder ${dir}; disk-full episode ${diskFull}`);
try {
  const first = await startServer(true);
  resumes.push({ expectedEqual: true, mapLine: first.mapLine, bootMs: first.bootMs });
  const traffic = Promise.all(Array.from({ length: clients }, client));
  const end = t0 + durationMs;
  let nextKill = t0 + killEveryMs * (0.75 + 0.5 * rand());
  const fullAt = diskFull === 'planned' ? t0 + durationMs * 0.4 : Infinity;
  let fullDone = false;
  const rssTimer = setInterval(sampleRss, 5000);
  while (performance.now() < end) {
    const now = performance.now();
    if (!fullDone && now >= fullAt) {
      fullDone = true;
      await diskFullEpisode(Math.min(10, Math.max(3, durationMs / 60_000 * 3)));
      diskFull = `done: ${serverEvents.at(-1)}; lines dropped then: telemetry.jsonl ${dropped.telemetry}, swaps.jsonl ${dropped.swaps}`;
      nextKill = Math.max(nextKill, performance.now() + 3000);
      continue;
    }
    if (now >= nextKill && end - now > 8000) {
      await killAndRestart();
      nextKill = performance.now() + killEveryMs * (0.75 + 0.5 * rand());
      continue;
    }
    await new Promise((res) => setTimeout(res, 100));
  }
  clearInterval(rssTimer);
  stopping = true;
  await traffic;
  // A clean stop last: SIGTERM, the map written at close.
  const s = server!;
  const exited = new Promise<number | null>((res) => s.child.once('exit', res));
  s.child.kill('SIGTERM');
  const code = await exited;
  serverEvents.push(`SIGTERM: exit ${code}`);
  const last = checkFolder('after the final stop');
  const replay = replaySwaps(dir);
  const finalEqual = sameMap(last.expected, replay.map ?? undefined);

  // ---- What was lost. ----
  const inFlightAtKill = (d: Done) => kills.some((k) => d.start < k && d.end >= k);
  const count = (f: (d: Done) => boolean) => done.filter(f).length;
  const failed = (d: Done) => d.outcome === 'status-5xx' || d.outcome === 'torn' || d.outcome === 'error' || d.outcome === 'unexpected-4xx';
  const lostAtKill = count((d) => failed(d) && inFlightAtKill(d));
  const lostOtherwise = done.filter((d) => failed(d) && !inFlightAtKill(d));
  const folderBad = checks.filter((c) => !c.mapLoads || c.broken !== 0 || c.problem);
  const resumeBad = resumes.filter((r) => !r.expectedEqual);
  let swapsApplied = 0;
  for (const line of readFileSync(join(dir, 'swaps.jsonl'), 'utf8').split('\n')) if (line.startsWith('{"v":1,"time"')) swapsApplied++;
  const f = (x: number) => x.toLocaleString('en-US');
  console.log(`\nrequests ${f(done.length)}: ok ${f(count((d) => d.outcome === 'ok'))}, aborted by their client ${f(count((d) => d.outcome === 'aborted'))}, ` +
    `bad input refused (4xx) ${f(count((d) => d.outcome === 'refused-as-expected'))}, not accepted while the server was down ${f(count((d) => d.outcome === 'not-accepted'))}`);
  console.log(`kills ${kills.length}, restarts ${resumes.length - 1} (boot ${resumes.map((r) => `${(r.bootMs / 1000).toFixed(1)} s`).join(', ')}); swaps applied ${f(swapsApplied)} (swaps.jsonl, every run)`);
  for (const r of resumes) console.log(`  map: ${r.mapLine}${r.expectedEqual ? '' : '  <- NOT where the record ended'}`);
  console.log(`disk-full episode: ${diskFull}`);
  console.log(`record: ${checks.length} checks, map.json loads in ${checks.filter((c) => c.mapLoads).length}, broken lines ${checks.reduce((a, c) => a + Math.max(0, c.broken), 0)}; ` +
    `final map.json == swaps.jsonl replay: ${finalEqual ? 'yes' : 'NO'}; server RSS MiB ${rss.length ? `${Math.min(...rss)}..${Math.max(...rss)}` : '-'}`);
  console.log(`server: ${serverEvents.join('; ') || '-'}`);
  const engineLines = readFileSync(serverLog, 'utf8').split('\n').filter((l) => /engine:|internal/i.test(l));
  if (engineLines.length > 0) console.log(`server errors (${engineLines.length}): ${engineLines.slice(0, 3).join(' | ')}`);
  console.log(`LOST: ${lostAtKill} requests in flight at a kill (expected); ${lostOtherwise.length} other requests; ${resumeBad.length} restarts not at the last recorded map; ${folderBad.length} folder checks failed`);
  for (const d of lostOtherwise.slice(0, 10)) console.log(`  lost: ${d.kind} ${d.outcome} at ${((d.start - t0) / 1000).toFixed(1)} s: ${d.detail ?? ''}`);
  for (const c of folderBad.slice(0, 5)) console.log(`  folder: ${c.when}: ${c.problem ?? `map loads ${c.mapLoads}, broken ${c.broken}`}`);
  process.exitCode = lostOtherwise.length === 0 && resumeBad.length === 0 && folderBad.length === 0 && finalEqual ? 0 : 1;
} finally {
  stopping = true;
  const last = server as { child: ChildProcessByStdio<null, null, Readable> } | null;
  if (last && last.child.exitCode === null) last.child.kill('SIGKILL');
  if (existsSync(mount)) try { execFileSync('umount', [mount], { stdio: 'ignore' }); } catch { /* not mounted */ }
  rmSync(root, { recursive: true, force: true });
}
