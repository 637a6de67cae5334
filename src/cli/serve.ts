// `residency serve`: the OpenAI-compatible server with live residency control, /metrics and a dashboard.
import { MEMORY_HELP, MEMORY_OPTIONS, parseMemoryFlags } from './memory-flags.ts';
import { KV_HELP, KV_OPTIONS, kvBootLine, parseKvFlags } from './kv-flags.ts';
import { resolve, join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { parseBackendName, parseThreads } from '../backend/registry.ts';
import { loadCountsDump, loadRowMap } from '../residency/files.ts';
import { defaultHot, startServing } from '../server/boot.ts';
import { defaultServerConfig } from '../server/types.ts';
import type { CliCommand } from './command.ts';
import { packageRoot } from './generate.ts';
import { parseArgs } from 'node:util';
import { readRegularFileSync } from '../util/regular-file.ts';

/** Flags plus at most one positional, the model folder (`residency serve MODEL`, as `vllm serve MODEL`). */
function parseServeArgs(argv: string[]) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: true });
  } catch (err) {
    throw new ResidencyError('BAD_ARGUMENT', `${(err as Error).message}\n\n${SERVE_HELP}`);
  }
  const { values, positionals } = parsed;
  if (positionals.length > 1) throw new ResidencyError('BAD_ARGUMENT', `one MODEL folder at most, got ${positionals.map((p) => `'${p}'`).join(', ')}`);
  if (positionals.length === 1 && values.model !== undefined) throw new ResidencyError('BAD_ARGUMENT', `give the model once: '${positionals[0]}' or --model '${values.model}', not both`);
  return { ...values, model: values.model ?? positionals[0] };
}

function readTemplate(path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  try {
    return readRegularFileSync(path);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new ResidencyError('BAD_ARGUMENT', `--chat-template ${path}: cannot read it (${err.code === 'ENOTREG' ? err.message : err.code ?? err.message})`);
  }
}

/** The hot count serve uses for the shipped tiny-moe's 64 experts (boot.ts's rule, stated in --help). */
const DEFAULT_HOT_TINY = defaultHot(64);

export const SERVE_HELP = `usage: residency serve [MODEL] [options]      (as vllm serve MODEL; or -m/--model MODEL, as llama-server)

  MODEL, -m/--model DIR  checkpoint folder (default: models/tiny-moe in the package)
  --served-model-name NAME  the name in /v1/models and requests' \`model\` (default: the checkpoint's folder name)
  --chat-template FILE a Jinja chat template for /v1/chat/completions, replacing the checkpoint's; a checkpoint
                       without one (no chat_template.jinja, no chat_template in tokenizer_config.json) refuses chat
  --backend cpu|cuda   where the model runs (default cpu)
  --hot H              experts per layer in the hot bank (default: round(E x 295/384), the reference ratio:
                       ${DEFAULT_HOT_TINY} of 64 for the shipped tiny-moe; on CUDA at real shapes, as many as fit the
                       --gpu-memory-utilization budget, all when they fit); H = E serves without a residency controller
  --map MAP.json       start the banks from this map (a rowmap; overrides --hot and the map DIR keeps)
  --residency-dir DIR  telemetry.jsonl, swaps.jsonl, steps.json go to DIR; DIR/control.json and DIR/GO
                       control the live controller (as POST /v1/residency/control does); DIR/map.json keeps
                       the map the banks hold (with its boot map and counts), and a restart resumes from it
  --fresh              with --residency-dir: start from the default map (or --hot), not DIR/map.json (moved
                       to DIR/map.json.stale)
  --prior COUNTS.json  seed prior for the controller: a counts dump of this model (dump_counts, as fit-map reads);
                       worth budgets.prior_picks_per_expert (default 1) pseudo-picks per expert, it helps while
                       live counts are sparse (few users) and fades as they grow
  --adapt              adapt from the start (default: boot frozen, counting only, until GO or {"freeze": false})
  --port N             TCP port (default 8000; 0 = any free port)
  --host ADDR          address to listen on (default 127.0.0.1)
  --api-key KEY        require "Authorization: Bearer KEY" on /v1/* (default: env RESIDENCY_API_KEY, else none)
  --control-api-key KEY  POST /v1/residency/control takes this key instead (default: env RESIDENCY_CONTROL_API_KEY);
                       without it, control over HTTP is off unless --host is loopback
  --allowed-origins O,...  web pages (scheme://host[:port], or *) allowed to call the API and read its replies (CORS)
                       besides this server's own pages and, on a loopback --host, loopback pages (http://localhost:3000)
  --allowed-hosts H,...  host names a loopback --host answers besides loopback names (a proxy in front), or * for any;
                       the DNS-rebinding guard, independent of --allowed-origins
  --max-queue N        requests waiting to join the batch before new ones get 429 (default ${defaultServerConfig.maxQueue})
  --threads N|auto     cpu: worker threads sharing each step (bit-identical; default RESIDENCY_CPU_THREADS, else 1)
${MEMORY_HELP}
${KV_HELP}
  --max-body BYTES     request body limit (default ${defaultServerConfig.maxBodyBytes})
  --shutdown-timeout S on SIGTERM/SIGINT: stop accepting, refuse queued requests at once, give running streams
                       S seconds to finish, then end them (default 30)
  --no-access-log      no line per request on stderr (method, path, status, time to the response head)

Endpoints: GET /health, GET /v1/models[/ID], POST /v1/completions, POST /v1/chat/completions,
POST /tokenize, POST /detokenize, GET /version, GET /v1/residency, POST /v1/residency/control,
GET /v1/residency/stats, GET /metrics, dashboard at /.`;

const OPTIONS = {
  model: { type: 'string', short: 'm' },
  'served-model-name': { type: 'string' },
  'chat-template': { type: 'string' },
  'no-access-log': { type: 'boolean', default: false },
  backend: { type: 'string', default: 'cpu' },
  hot: { type: 'string' },
  map: { type: 'string' },
  'residency-dir': { type: 'string' },
  fresh: { type: 'boolean', default: false },
  prior: { type: 'string' },
  adapt: { type: 'boolean', default: false },
  port: { type: 'string', default: '8000' },
  host: { type: 'string', default: '127.0.0.1' },
  'api-key': { type: 'string' },
  'control-api-key': { type: 'string' },
  'allowed-origins': { type: 'string' },
  'allowed-hosts': { type: 'string' },
  'max-queue': { type: 'string' },
  'max-body': { type: 'string' },
  'shutdown-timeout': { type: 'string' },
  threads: { type: 'string' },
  ...MEMORY_OPTIONS,
  ...KV_OPTIONS,
  help: { type: 'boolean', short: 'h', default: false },
} as const;

function int(flag: string, text: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    throw new ResidencyError('BAD_ARGUMENT', `--${flag} '${text}': expected an integer in ${min}..${max}`);
  }
  return n;
}

export const serveCommand: CliCommand = {
  name: 'serve',
  async run(argv) {
    const v = parseServeArgs(argv);
    if (v.help) {
      console.log(SERVE_HELP);
      return 0;
    }
    const backend = parseBackendName(v.backend);
    if (v.hot !== undefined && v.map !== undefined) throw new ResidencyError('BAD_ARGUMENT', 'give --hot H or --map MAP.json, not both');
    if (v.fresh && v.map !== undefined) throw new ResidencyError('BAD_ARGUMENT', 'give --fresh or --map MAP.json, not both (--map already starts from its own map)');
    if (v.fresh && v['residency-dir'] === undefined) throw new ResidencyError('BAD_ARGUMENT', '--fresh needs --residency-dir DIR (only a residency folder keeps a map to resume)');
    const maxQueue = int('max-queue', v['max-queue'], 1);
    const kv = parseKvFlags(v);
    const maxBody = int('max-body', v['max-body'], 1024);
    const shutdownS = int('shutdown-timeout', v['shutdown-timeout'], 0, 86_400) ?? 30;
    const apiKey = v['api-key'] ?? process.env['RESIDENCY_API_KEY'];
    const controlApiKey = v['control-api-key'] ?? process.env['RESIDENCY_CONTROL_API_KEY'];
    const list = (text: string | undefined) => (text ?? '').split(',').map((o) => o.trim()).filter((o) => o !== '');
    const allowedOrigins = list(v['allowed-origins']);
    const allowedHosts = list(v['allowed-hosts']);
    const chatTemplate = readTemplate(v['chat-template']);
    const name = v['served-model-name'];
    if (name !== undefined && (name.trim() === '' || name.length > 256)) throw new ResidencyError('BAD_ARGUMENT', `--served-model-name '${name.slice(0, 40)}': expected 1..256 characters`);
    const serving = await startServing({
      modelDir: resolve(v.model ?? join(packageRoot(), 'models/tiny-moe')),
      ...(chatTemplate !== undefined ? { chatTemplate } : {}),
      ...(name !== undefined ? { servedModelName: name } : {}),
      ...(v['no-access-log'] ? {} : { accessLog: (line: string) => console.error(line) }),
      backend,
      hot: int('hot', v.hot, 1),
      map: v.map ? loadRowMap(v.map) : undefined,
      residencyDir: v['residency-dir'],
      fresh: v.fresh,
      ...(v.prior !== undefined ? { prior: { dump: loadCountsDump(v.prior), source: `--prior ${v.prior}` } } : {}),
      adapt: v.adapt,
      port: int('port', v.port, 0, 65535)!,
      host: v.host,
      config: { ...(apiKey ? { apiKey } : {}), ...(controlApiKey ? { controlApiKey } : {}), allowedOrigins, allowedHosts, ...(maxQueue ? { maxQueue } : {}), ...(maxBody ? { maxBodyBytes: maxBody } : {}) },
      scheduler: kv.scheduler,
      kvCache: kv.kvCache,
      ...(kv.prefixCaching !== undefined ? { prefixCaching: kv.prefixCaching } : {}),
      ...(v.threads !== undefined ? { threads: parseThreads(v.threads) } : {}),
      ...parseMemoryFlags(v),
    });
    const { spec } = serving.model;
    const banks = serving.backend.banks;
    const cpu = serving.backend as Partial<{ threads: number; simd: boolean }>;
    const compute = cpu.threads !== undefined ? ` ${cpu.threads} thread${cpu.threads > 1 ? 's' : ''}${cpu.simd ? ', simd' : ''}` : '';
    if (serving.driver) console.error(`map: ${serving.mapSource.text}`);
    console.error(`serving ${name ?? spec.name} on ${serving.server.url} (${v.backend}${compute}; ${banks.hotPerLayer}/${banks.experts} experts hot per layer; ` +
      `residency ${serving.driver ? (v.adapt ? 'adapting' : 'frozen until GO or {"freeze": false}') : 'off'}; map ${serving.mapSource.source}${apiKey ? '; API key required' : ''})`);
    const hotReason = (serving.backend as { hotReason?: string }).hotReason;
    if (hotReason) console.error(`hot bank: ${hotReason}`);
    const pool = serving.engine.kvCache;
    if (pool) console.error(kvBootLine(pool, serving.engine.config));
    const kvReason = (serving.backend as { kvReason?: string }).kvReason;
    if (kvReason) console.error(`kv cache: ${kvReason}`);
    console.error(`dashboard: ${serving.server.url}/   metrics: ${serving.server.url}/metrics`);
    await new Promise<void>((done) => {
      const stop = (sig: string) => {
        console.error(`${sig}: refusing queued requests, giving running streams up to ${shutdownS} s, then stopping (again to stop at once)`);
        // The engine first: it refuses new and queued requests (503) and finishes the running ones within
        // the deadline; only then are the connections closed (closing them first cut every stream short).
        void serving.shutdown(shutdownS * 1000).then(({ refused, cut }) => {
          console.error(`stopped: ${refused} queued requests refused, ${cut} running streams ended by the timeout`);
        }).then(done);
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    return 0;
  },
};
