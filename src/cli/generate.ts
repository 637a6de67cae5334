// `residency generate`: load a checkpoint, run one prompt through the engine on the CPU backend, print the
// tokens (or one JSON object) and the prefill/decode speed.
import { MEMORY_HELP, MEMORY_OPTIONS, parseMemoryFlags } from './memory-flags.ts';
import { withMaxModelLen } from '../model/max-model-len.ts';
import { KV_HELP, KV_OPTIONS, kvBootLine, parseKvFlags, type KvFlags } from './kv-flags.ts';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ResidencyError } from '../errors.ts';
import type { Backend } from '../backend/backend.ts';
import { createBackend, parseBackendName, parseThreads, type BackendName } from '../backend/registry.ts';
import type { BankPlacement } from '../backend/slot-tables.ts';
import { createEngine } from '../engine/engine.ts';
import type { ResidencyHook } from '../engine/residency-hook.ts';
import type { FinishReason } from '../engine/types.ts';
import type { LoadedModel } from '../model/load.ts';
import { loadModelFor } from '../backend/load-for.ts';
import { moeLayerCount } from '../model/spec.ts';
import { progressLine } from '../model/progress.ts';
import type { CliCommand } from './command.ts';
import { loadCountsDump, loadRowMap } from '../residency/files.ts';
import { residencyHookFactory } from '../engine/residency-driver.ts';
import { openTraceFile } from '../sim/traces/recorder.ts';
import { checkFolderPath } from '../util/folders.ts';

export const GENERATE_HELP = `usage: residency generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]

  --model DIR          checkpoint folder (default: models/tiny-moe in the package)
  --prompt TEXT        prompt text (encoded with the checkpoint's tokenizer, no special tokens added)
  --prompt-ids IDS     prompt as comma-separated token ids
  --max-tokens N       tokens to generate at most (default 32)
  --temperature T      0 = greedy (default 0)
  --top-p P            nucleus mass in (0, 1] (default 1)
  --seed S             sampler seed (same seed, same tokens)
  --ignore-eos         keep generating through the model's EOS token
  --hot H              experts per layer in the hot bank (default: all); results do not depend on it
  --map MAP.json       start the banks from this map (a rowmap; overrides --hot)
  --residency-dir DIR  run the residency controller live: telemetry.jsonl, swaps.jsonl, steps.json go to DIR;
                       it boots frozen (counting only): create DIR/GO or write DIR/control.json to adapt
  --prior COUNTS.json  with --residency-dir: seed prior for the controller, a counts dump of this model
                       (worth budgets.prior_picks_per_expert pseudo-picks per expert; see residency serve)
  --record-trace FILE  write every step's routing as a JSONL trace (residency simulate --traces FILE --phases recorded)
  --threads N|auto     cpu: worker threads sharing each step (bit-identical; default RESIDENCY_CPU_THREADS, else 1)
${MEMORY_HELP}
${KV_HELP}
  --backend NAME       cpu (default) or cuda (an NVIDIA GPU, kernels built by npm run build:kernels)
  --json               print exactly one JSON object {"prompt_ids","tokens","text"} on stdout`;

/** The flags of `generate`; commands that extend it (e.g. with --map) spread these into their own. */
export const GENERATE_OPTIONS = {
  model: { type: 'string' },
  prompt: { type: 'string' },
  'prompt-ids': { type: 'string' },
  'max-tokens': { type: 'string', default: '32' },
  temperature: { type: 'string', default: '0' },
  'top-p': { type: 'string', default: '1' },
  seed: { type: 'string' },
  'ignore-eos': { type: 'boolean', default: false },
  hot: { type: 'string' },
  map: { type: 'string' },
  'residency-dir': { type: 'string' },
  prior: { type: 'string' },
  'record-trace': { type: 'string' },
  threads: { type: 'string' },
  ...MEMORY_OPTIONS,
  ...KV_OPTIONS,
  backend: { type: 'string', default: 'cpu' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

export interface GenerateOptions {
  readonly modelDir: string;
  readonly prompt?: string;
  readonly promptIds?: readonly number[];
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly seed?: number;
  readonly ignoreEos: boolean;
  readonly hot?: number;
  readonly json: boolean;
  readonly backend?: BackendName;
  /** Write every step's routing here as a JSONL routing trace. */
  readonly recordTrace?: string;
  /** cpu: worker threads (a count or 'auto'); default RESIDENCY_CPU_THREADS, else 1. */
  readonly threads?: number | 'auto';
  readonly gpuMemoryUtilization?: number;
  /** cuda: the host expert lane (--host-experts). */
  readonly hostExperts?: { readonly threads?: number; readonly share?: number; readonly parts?: number };
  readonly maxModelLen?: number;
  /** The KV cache and scheduler flags (kv-flags.ts). */
  readonly kv?: KvFlags;
}

/** What an extending command may add: a placement for the banks and a residency hook for the engine. */
export interface GenerateExtensions {
  /** Initial bank placement (e.g. from --map); overrides --hot. */
  placement?: (model: LoadedModel) => BankPlacement | undefined;
  /** Builds the residency hook once the backend exists (counting, drains, swaps between steps). */
  hookFactory?: (backend: Backend, model: LoadedModel) => ResidencyHook | undefined;
}

export interface GenerateResult {
  readonly promptIds: number[];
  readonly tokens: number[];
  readonly text: string;
  readonly reason: FinishReason;
  readonly prefill: { readonly tokens: number; readonly seconds: number };
  readonly decode: { readonly tokens: number; readonly seconds: number };
}

/** The package root (holds package.json), found from this file whether run from source or bundled. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) return process.cwd();
    dir = up;
  }
  return dir;
}

function number(flag: string, text: string, check: (n: number) => boolean, expected: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || !check(n)) {
    throw new ResidencyError('BAD_ARGUMENT', `--${flag} '${text}': expected ${expected}`);
  }
  return n;
}

/** Parses the values of GENERATE_OPTIONS into options; throws BAD_ARGUMENT naming the flag. */
export function generateOptionsFrom(values: { [K in keyof typeof GENERATE_OPTIONS]?: string | boolean }): GenerateOptions {
  const str = (k: keyof typeof GENERATE_OPTIONS): string | undefined => values[k] as string | undefined;
  const prompt = str('prompt');
  const idsText = str('prompt-ids');
  if ((prompt === undefined) === (idsText === undefined)) {
    throw new ResidencyError('BAD_ARGUMENT', `give exactly one of --prompt TEXT or --prompt-ids 1,2,3\n\n${GENERATE_HELP}`);
  }
  const promptIds = idsText?.split(',').map((t) => number('prompt-ids', t, (n) => Number.isInteger(n) && n >= 0, 'comma-separated token ids (integers >= 0)'));
  const int = (flag: keyof typeof GENERATE_OPTIONS, min: number): number | undefined => {
    const t = str(flag);
    return t === undefined ? undefined : number(flag, t, (n) => Number.isInteger(n) && n >= min, `an integer >= ${min}`);
  };
  const backend = parseBackendName(str('backend') ?? 'cpu');
  const kv = parseKvFlags(values);
  return {
    modelDir: resolve(str('model') ?? join(packageRoot(), 'models/tiny-moe')),
    prompt,
    promptIds,
    maxTokens: int('max-tokens', 1)!,
    temperature: number('temperature', str('temperature')!, (n) => n >= 0, 'a number >= 0 (0 = greedy)'),
    topP: number('top-p', str('top-p')!, (n) => n > 0 && n <= 1, 'a number in (0, 1]'),
    seed: int('seed', 0),
    ignoreEos: values['ignore-eos'] === true,
    hot: int('hot', 0),
    json: values.json === true,
    backend,
    recordTrace: str('record-trace'),
    threads: str('threads') === undefined ? undefined : parseThreads(str('threads')!),
    ...parseMemoryFlags(values as { 'gpu-memory-utilization'?: string; 'max-model-len'?: string }),
    kv,
  };
}

/** Loads the model, generates, and returns the result; prints progress and speed on stderr. */
export async function runGenerate(opts: GenerateOptions, ext: GenerateExtensions = {}): Promise<GenerateResult> {
  const progress = progressLine({ label: 'loading' });
  let model: LoadedModel;
  let backend: Backend;
  let promptIds: number[];
  try {
    model = await loadModelFor(opts.modelDir, opts.backend ?? 'cpu', { onProgress: progress.onProgress });
    model.spec = withMaxModelLen(model.spec, opts.maxModelLen);
    promptIds = opts.promptIds ? [...opts.promptIds] : model.tokenizer.encode(opts.prompt!);
    if (promptIds.length === 0) throw new ResidencyError('BAD_ARGUMENT', '--prompt encodes to no tokens: give a longer prompt');
    const placement = ext.placement?.(model) ?? (opts.hot !== undefined ? { hotPerLayer: opts.hot } : undefined);
    backend = await createBackend(opts.backend ?? 'cpu', model, {
      ...(opts.kv ? { kvCache: opts.kv.kvCache } : {}),
      ...(placement ? { placement } : {}),
      ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
      takeExperts: true, // the model was loaded here for this backend alone
      ...(opts.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: opts.gpuMemoryUtilization } : {}),
      ...(opts.hostExperts ? { hostExperts: opts.hostExperts } : {}),
      maxNumSeqs: 1,
      onProgress: progress.onProgress,
    });
  } finally {
    progress.finish();
  }
  let engine: ReturnType<typeof createEngine> | undefined;
  let trace: ReturnType<typeof openTraceFile> | undefined;
  const tokens: number[] = [];
  let reason: FinishReason;
  const prefill = { tokens: promptIds.length, seconds: 0 };
  const decode = { tokens: 0, seconds: 0 };
  // Whatever ends the run (a refused hook, a failed step), the engine, trace file and backend are let go.
  try {
    const hook = ext.hookFactory?.(backend, model);
    const { spec } = model;
    const tr = opts.recordTrace
      ? openTraceFile(opts.recordTrace, { layers: moeLayerCount(spec), experts: spec.numExperts, topK: spec.topK }, `generate ${spec.name}`)
      : undefined;
    trace = tr;

    // Steps up to the one that emits the first token are prefill; the rest are decode.
    let firstToken = false;
    let prefillDone = false;
    engine = createEngine(backend, {
      hook,
      ...(opts.kv ? { scheduler: opts.kv.scheduler } : {}),
      ...(opts.kv?.prefixCaching !== undefined ? { prefixCaching: opts.kv.prefixCaching } : {}),
      onRouting: tr ? (chunks, routing) => tr.recorder.recordStep(chunks.map((c) => ({ seq: c.seq, startPos: c.startPos, tokens: c.tokens.length })), routing) : undefined,
      onStep: (r) => {
        if (prefillDone) decode.seconds += r.durationNs / 1e9;
        else {
          prefill.seconds += r.durationNs / 1e9;
          prefillDone = firstToken;
        }
      },
    });
    if (engine.kvCache) process.stderr.write(`${kvBootLine(engine.kvCache, engine.config)}\n`);
    reason = await new Promise<FinishReason>((resolveDone, reject) => {
      const sampling = { temperature: opts.temperature, topP: opts.topP, seed: opts.seed, maxTokens: opts.maxTokens, ignoreEos: opts.ignoreEos };
      engine!.submit({ id: 'generate', promptIds, sampling }, (ev) => {
        if (ev.type === 'token') {
          tokens.push(ev.tokenId);
          firstToken = true;
        } else if (ev.reason === 'error') reject(new ResidencyError('INTERNAL', `generation failed: ${ev.error}`));
        else resolveDone(ev.reason);
      });
    });
  } finally {
    await engine?.close();
    trace?.close();
    backend.dispose();
  }
  decode.tokens = Math.max(0, tokens.length - 1);
  return { promptIds, tokens, text: model.tokenizer.decode(tokens), reason, prefill, decode };
}

function rate(tokens: number, seconds: number): string {
  return seconds > 0 ? `${(tokens / seconds).toFixed(1)} tok/s` : '-';
}

/** Prints a result: text (or the JSON object) on stdout, speed on stderr. */
export function printGenerateResult(r: GenerateResult, json: boolean): void {
  if (json) process.stdout.write(`${JSON.stringify({ prompt_ids: r.promptIds, tokens: r.tokens, text: r.text })}\n`);
  else process.stdout.write(`${r.text}\n`);
  process.stderr.write(
    `prefill: ${r.prefill.tokens} tokens in ${(r.prefill.seconds * 1e3).toFixed(1)} ms (${rate(r.prefill.tokens, r.prefill.seconds)}); ` +
      `decode: ${r.decode.tokens} tokens in ${(r.decode.seconds * 1e3).toFixed(1)} ms (${rate(r.decode.tokens, r.decode.seconds)}); ` +
      `finished: ${r.reason}\n`,
  );
}

/** parseArgs with unknown or malformed flags turned into a BAD_ARGUMENT that shows the usage. */
export function parseFlags<O extends NonNullable<ParseArgsConfig['options']>>(argv: string[], options: O, help: string) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new ResidencyError('BAD_ARGUMENT', `${(err as Error).message}\n\n${help}`);
  }
}

export const generateCommand: CliCommand = {
  name: 'generate',
  async run(argv) {
    const values = parseFlags(argv, GENERATE_OPTIONS, GENERATE_HELP);
    if (values.help) {
      console.log(GENERATE_HELP);
      return 0;
    }
    const opts = generateOptionsFrom(values);
    const map = values.map ? loadRowMap(values.map) : undefined;
    const dir = values['residency-dir'];
    // Refused before the model loads; the telemetry writer's recursive mkdir would hang under /proc.
    if (dir !== undefined) checkFolderPath(dir, '--residency-dir');
    // The controller runs only with --residency-dir; a prior without it would be silently unused.
    if (values.prior !== undefined && dir === undefined) {
      throw new ResidencyError('BAD_ARGUMENT', '--prior needs --residency-dir DIR (the residency controller runs only with it)');
    }
    const prior = values.prior !== undefined ? { dump: loadCountsDump(values.prior), source: `--prior ${values.prior}` } : undefined;
    const ext: GenerateExtensions = {
      placement: () => map,
      hookFactory: dir ? residencyHookFactory({ map, dir, ...(prior ? { prior } : {}) }) : undefined,
    };
    printGenerateResult(await runGenerate(opts, ext), opts.json);
    return 0;
  },
};
