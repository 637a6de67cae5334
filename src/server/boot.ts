// Builds everything `residency serve` runs: model, backend, residency driver, engine, HTTP server.
// Tests call it too, so the served stack and the tested stack are the same code.
import { join } from 'node:path';
import type { Backend } from '../backend/backend.ts';
import { createBackend, type BackendName, type CreateBackendOptions } from '../backend/registry.ts';
import type { BankPlacement } from '../backend/slot-tables.ts';
import { createEngine, type Engine } from '../engine/engine.ts';
import { ResidencyDriver } from '../engine/residency-driver.ts';
import type { SchedulerConfig } from '../engine/scheduler.ts';
import { ResidencyError } from '../errors.ts';
import { readChatTemplate } from '../model/chat-template.ts';
import type { LoadedModel } from '../model/load.ts';
import { loadModelFor } from '../backend/load-for.ts';
import { progressLine } from '../model/progress.ts';
import { withMaxModelLen } from '../model/max-model-len.ts';
import { DEFAULT_SCHEDULER } from '../engine/scheduler.ts';
import type { CountsDump } from '../residency/counts.ts';
import type { Budgets } from '../residency/policy.ts';
import type { RowMap } from '../residency/rowmap.ts';
import { checkFolderPath } from '../util/folders.ts';
import { mapPath, resumeMap, type MapSource } from '../residency/map-file.ts';
import type { ModelSpec } from '../model/spec.ts';
import { renameSync } from 'node:fs';
import { basename } from 'node:path';
import { readRegularFile } from '../util/regular-file.ts';
import { accessWarnings } from './access.ts';
import { DriverView } from './driver-view.ts';
import { OffThreadEncoder } from './prompt-tokenizer.ts';
import { startServer, type RunningServer } from './server.ts';
import { defaultServerConfig, type HostLaneView, type ServerConfig, type ServerModel } from './types.ts';

/** After the last step of a shutdown, what the streams' last events get to reach their sockets. */
const SHUTDOWN_GRACE_MS = 250;

/** How often an idle server reads the control and GO files. */
const IDLE_POLL_MS = 500;

export interface ServeOptions {
  readonly modelDir: string;
  readonly backend: BackendName;
  /** cpu: worker threads (a count or 'auto'); default RESIDENCY_CPU_THREADS, else 1. */
  readonly threads?: number | 'auto';
  /** cuda: share of the GPU's memory to use (default 0.9). */
  readonly gpuMemoryUtilization?: number;
  /** Positions a sequence may hold (--max-model-len; default the model's). */
  readonly maxModelLen?: number;
  /** cuda: the host expert lane (--host-experts). */
  readonly hostExperts?: { readonly threads?: number; readonly share?: number; readonly parts?: number };
  /** Hot experts per layer; equal to the expert count means all hot and no residency controller. */
  readonly hot?: number;
  readonly map?: RowMap;
  readonly residencyDir?: string;
  /**
   * Start from the default map (or --hot) even when the residency folder holds the map of an earlier run
   * (DIR/map.json, then moved to map.json.stale). Without it and without `map`, that map is resumed.
   */
  readonly fresh?: boolean;
  /** Start adapting at once instead of booting frozen (counting only). */
  readonly adapt?: boolean;
  readonly budgets?: Partial<Budgets>;
  /** A seed prior for the controller (a counts dump of this model; `source` names it in errors). */
  readonly prior?: { readonly dump: CountsDump; readonly source?: string };
  readonly port: number;
  readonly host: string;
  readonly config?: Partial<ServerConfig>;
  readonly scheduler?: Partial<SchedulerConfig>;
  /** The paged KV cache's block size, dtype and size (CreateBackendOptions.kvCache). */
  readonly kvCache?: CreateBackendOptions['kvCache'];
  /** Prefix caching on a paged backend (default on). */
  readonly prefixCaching?: boolean;
  readonly log?: (message: string) => void;
  /** One line per HTTP request (method, path, status, time); default: off. */
  readonly accessLog?: (line: string) => void;
  readonly model?: LoadedModel;
  /** The name clients use in `model` and see in /v1/models (--served-model-name; default the checkpoint's). */
  readonly servedModelName?: string;
  /** A chat template's text that replaces the checkpoint's (--chat-template FILE). */
  readonly chatTemplate?: string;
}

export interface Serving {
  readonly server: RunningServer;
  readonly engine: Engine;
  readonly backend: Backend;
  readonly driver?: ResidencyDriver;
  readonly model: LoadedModel;
  /**
   * A deadline-bound stop (SIGTERM): stop accepting; end the queued requests at once with a clear error
   * (they never started); let the running streams finish for up to `timeoutMs`, then end them with an
   * error naming the timeout; then close. Returns how many were refused and how many cut.
   */
  shutdown(timeoutMs: number): Promise<{ refused: number; cut: number }>;
  close(): Promise<void>;
  /** Where the map came from: '--map', resumed from the residency folder, or the default; and in words. */
  readonly mapSource: { readonly source: MapSource; readonly text: string };
}

/** The hot share of the reference deployment (295 of 384 experts per layer; design.md section 2). */
export const DEFAULT_HOT_SHARE = 295 / 384;

/** The hot experts per layer serve uses without --hot or --map. */
export const defaultHot = (experts: number): number => Math.max(1, Math.round(experts * DEFAULT_HOT_SHARE));

/**
 * The chat template (the --chat-template file's text, else the checkpoint's own: chat_template.jinja or
 * tokenizer_config.json's chat_template) and the special tokens templates use.
 */
async function chatInfo(dir: string, override: string | undefined): Promise<Pick<ServerModel, 'chatTemplate' | 'chatTemplateSource' | 'bosToken' | 'eosToken'>> {
  const template = override ?? (await readChatTemplate(dir));
  let cfg: Record<string, unknown> = {};
  try {
    cfg = JSON.parse(await readRegularFile(join(dir, 'tokenizer_config.json'))) as Record<string, unknown>;
  } catch { /* no special tokens named */ }
  const tok = (v: unknown) => (typeof v === 'string' ? v : typeof v === 'object' && v && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : undefined);
  return {
    ...(template !== undefined ? { chatTemplate: template, chatTemplateSource: override !== undefined ? '--chat-template' as const : 'checkpoint' as const } : {}),
    ...(tok(cfg['bos_token']) ? { bosToken: tok(cfg['bos_token']) } : {}),
    ...(tok(cfg['eos_token']) ? { eosToken: tok(cfg['eos_token']) } : {}),
  };
}

/**
 * The map serve starts from: --map; else, with a residency folder, the map of the run before (DIR/map.json),
 * checked against this model, unless `fresh` (then moved aside to map.json.stale); else none (the default map).
 */
function bootMap(opts: ServeOptions, spec: ModelSpec): { map?: RowMap; source: MapSource; text: string } {
  if (opts.map) return { map: opts.map, source: '--map', text: `--map (${opts.map.hot_per_layer}/${opts.map.experts} hot)` };
  const dir = opts.residencyDir;
  if (dir === undefined) return { source: 'default', text: 'default' };
  const path = mapPath(dir);
  if (opts.fresh) {
    try {
      renameSync(path, `${path}.stale`);
      return { source: 'default', text: `default (--fresh: ${path} moved to ${basename(path)}.stale)` };
    } catch {
      return { source: 'default', text: 'default (--fresh)' };
    }
  }
  const startOver = 'give --fresh to start from the default map (that file is moved aside), or --map MAP.json';
  let resume;
  try {
    resume = resumeMap(dir);
  } catch (err) {
    throw new ResidencyError('BAD_MAP', `${(err as Error).message}: ${startOver}`, { cause: err });
  }
  if (resume === null) return { source: 'default', text: `default (no ${basename(path)} in ${dir} yet)` };
  const { record, map: m } = resume;
  if (m.model !== spec.name) throw new ResidencyError('BAD_MAP', `${path} is a map of model '${m.model}', not '${spec.name}': ${startOver}`);
  if (m.layers !== spec.numLayers || m.experts !== spec.numExperts) {
    throw new ResidencyError('BAD_MAP', `${path} is a map of ${m.layers} layers x ${m.experts} experts, this model has ${spec.numLayers} x ${spec.numExperts}: ${startOver}`);
  }
  if (opts.hot !== undefined && opts.hot !== m.hot_per_layer) {
    throw new ResidencyError('BAD_ARGUMENT', `--hot ${opts.hot}, but ${path} (the map resumed) holds ${m.hot_per_layer} hot per layer: leave --hot out to resume it, or ${startOver}`);
  }
  const after = resume.movesAfter > 0 ? `, and the ${resume.movesAfter} row exchanges swaps.jsonl recorded after it` : '';
  return { map: m, source: 'resumed', text: `resumed from ${path} (written ${record.time}, ${record.swaps_applied} swaps into the run before${after})` };
}

export async function startServing(opts: ServeOptions): Promise<Serving> {
  const log = opts.log ?? ((m: string) => console.error(m));
  // Refused before the model loads; the telemetry writer's recursive mkdir would hang under /proc.
  if (opts.residencyDir !== undefined) checkFolderPath(opts.residencyDir, '--residency-dir');
  // Only the tensors this backend computes with: holding both raw and float32 would cost ~4x the checkpoint.
  const model = opts.model ?? (await loadModelFor(opts.modelDir, opts.backend));
  model.spec = withMaxModelLen(model.spec, opts.maxModelLen); // bounds requests and sizes the KV cache
  const { spec } = model;
  const boot = bootMap(opts, spec);
  const map = boot.map;
  // Without --hot or --map: CUDA sizes the hot bank from the memory budget (every expert if they fit: no residency
  // needed); the CPU takes the reference share, so the residency loop runs.
  const budgetSized = opts.backend === 'cuda' && opts.hot === undefined && !map;
  const hot = opts.hot ?? defaultHot(spec.numExperts);
  if (!map && (hot < 1 || hot > spec.numExperts)) {
    throw new ResidencyError('BAD_ARGUMENT', `--hot ${hot}: expected 1..${spec.numExperts} experts per layer`);
  }
  const placement: BankPlacement | undefined = map ?? (budgetSized ? undefined : { hotPerLayer: hot });
  const progress = progressLine({ label: 'loading' });
  let backend: Backend;
  try {
    backend = await createBackend(opts.backend, model, {
      ...(placement ? { placement } : {}),
      ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
      ...(opts.model === undefined ? { takeExperts: true } : {}), // loaded here for this backend alone
      ...(opts.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: opts.gpuMemoryUtilization } : {}),
      ...(opts.hostExperts ? { hostExperts: opts.hostExperts } : {}),
      ...(opts.kvCache ? { kvCache: opts.kvCache } : {}),
      maxNumSeqs: opts.scheduler?.maxRunning ?? DEFAULT_SCHEDULER.maxRunning,
      onProgress: progress.onProgress,
    });
  } finally {
    progress.finish();
  }
  try {
    return await serveOn(backend);
  } catch (err) {
    // Nothing is served (a busy port, an unwritable residency folder): let go of the backend (worker
    // threads, its memory) before reporting, so a caller that carries on does not leak it.
    backend.dispose();
    throw err;
  }

  async function serveOn(backend: Backend): Promise<Serving> {
    const withResidency = backend.banks.hotPerLayer < backend.banks.experts;
    if (!withResidency && (opts.adapt || opts.residencyDir !== undefined || opts.prior)) {
      throw new ResidencyError('BAD_ARGUMENT', 'every expert is hot, so there is nothing to adapt: --adapt, --residency-dir and --prior need --hot H below the expert count (or a --map)');
    }
    // Built directly (not through residencyHookFactory, which writes steps.json at process exit): close()
    // below writes it, so a server that is stopped and started again in one process leaves nothing behind.
    const driver = withResidency
      ? new ResidencyDriver({ backend, map, mapSource: boot.source, dir: opts.residencyDir, frozen: !opts.adapt, budgets: opts.budgets, ...(opts.prior ? { prior: opts.prior } : {}), log: (m) => log(`residency: ${m}`) })
      : undefined;
    const view = driver ? new DriverView(driver) : undefined;
    const config: ServerConfig = { ...defaultServerConfig, ...opts.config };
    const engine = createEngine(backend, {
      hook: driver,
      onStep: view ? (r) => view.onStep(r) : undefined,
      // The server answers 429 at maxQueue; the engine's own limit sits above it so it never refuses first.
      scheduler: { ...opts.scheduler, maxWaiting: Math.max(config.maxQueue + 1, opts.scheduler?.maxWaiting ?? 0) },
      ...(opts.prefixCaching !== undefined ? { prefixCaching: opts.prefixCaching } : {}),
      onError: (e) => log(`engine: ${e.message}`),
    });
    // Long prompts are tokenized in a worker thread, so one big prompt does not freeze every running stream.
    const t = model.tokenizer;
    const withSpecials = { ...t, isSpecial: (id: number) => t.decode([id], { skipSpecial: true }) === '' && t.decode([id]) !== '' };
    const encoder = new OffThreadEncoder(model.dir, withSpecials, log);
    const serverModel: ServerModel = { name: opts.servedModelName ?? spec.name, maxPositions: spec.maxPositions, tokenizer: encoder.tokenizer(), ...(await chatInfo(model.dir, opts.chatTemplate)) };
    const hostLane = (backend as { hostLane?: HostLaneView }).hostLane;
    const server = await startServer({ engine, model: serverModel, ...(view ? { residency: view } : {}), ...(hostLane ? { hostLane } : {}), config, log, ...(opts.accessLog ? { accessLog: opts.accessLog } : {}) }, { port: opts.port, host: opts.host });
    for (const line of accessWarnings(opts.host, config)) log(line);
    // The driver polls the control and GO files between steps; an idle server takes no steps, so poll
    // here too (between steps as well: a timer never runs inside a step).
    const idlePoll = driver && opts.residencyDir ? setInterval(() => driver.pollControl(), IDLE_POLL_MS) : undefined;
    idlePoll?.unref();
    const serving: Serving = {
      server, engine, backend, driver, model, mapSource: { source: boot.source, text: boot.text },
      async shutdown(timeoutMs) {
        const refused = engine.stopAdmitting('the server is shutting down: this request was still queued and never started; send it again (to another server)');
        const connectionsEnded = server.stopAccepting();
        const idle = engine.close();
        let timer: NodeJS.Timeout | undefined;
        const late = await Promise.race([idle.then(() => false), new Promise<boolean>((r) => { timer = setTimeout(() => r(true), timeoutMs); })]);
        clearTimeout(timer);
        const cut = late ? engine.cancelRunning(`the server is shutting down: this stream was ended by the shutdown timeout (${timeoutMs / 1000} s)`) : 0;
        await idle;
        // The streams' last events are written after the engine's last step: give the sockets a moment, and no
        // more. Connections that went idle since are closed now; one a client holds open (keep-alive, silent, half
        // a request) never ends by itself, and close() cuts whatever is left.
        server.closeIdleConnections();
        await Promise.race([connectionsEnded, new Promise((r) => setTimeout(r, SHUTDOWN_GRACE_MS).unref())]);
        await serving.close();
        return { refused, cut };
      },
      async close() {
        if (idlePoll) clearInterval(idlePoll);
        await server.close();
        await engine.close();
        await encoder.close();
        driver?.close();
        await driver?.mapSettled(); // a background write of map.json still running is let finish (it does not land)
        backend.dispose();
      },
    };
    return serving;
  }
}
