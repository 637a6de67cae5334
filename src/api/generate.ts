// generate(): one prompt through a loaded model on a backend and the engine, for programs that import
// the package (the CLI's `generate` does the same with flags, timings and the residency controller).
import { createBackend, type BackendName } from '../backend/registry.ts';
import { runToCompletion } from '../engine/complete.ts';
import { createEngine } from '../engine/engine.ts';
import type { FinishReason } from '../engine/types.ts';
import type { LoadedModel } from '../model/load.ts';

export interface GenerateOptions {
  /** Tokens to generate at most (default 64). */
  readonly maxTokens?: number;
  /** 0 = greedy (the default); otherwise seeded sampling with topP / topK / minP. */
  readonly temperature?: number;
  readonly topP?: number;
  readonly topK?: number;
  readonly minP?: number;
  readonly seed?: number;
  /** Keep generating past EOS. */
  readonly ignoreEos?: boolean;
  /** Where it runs (default cpu). */
  readonly backend?: BackendName;
  /** Hot experts per layer (default: all hot). */
  readonly hot?: number;
}

export interface Generation {
  readonly text: string;
  readonly tokens: readonly number[];
  readonly promptTokens: number;
  readonly finishReason: FinishReason;
}

/** Generates from `prompt` (text, or token ids); the backend lives for this call only. */
export async function generate(model: LoadedModel, prompt: string | readonly number[], opts: GenerateOptions = {}): Promise<Generation> {
  const promptIds = typeof prompt === 'string' ? model.tokenizer.encode(prompt) : [...prompt];
  const backend = await createBackend(opts.backend ?? 'cpu', model, { ...(opts.hot !== undefined ? { placement: { hotPerLayer: opts.hot } } : {}), maxNumSeqs: 1 });
  const engine = createEngine(backend);
  try {
    const sampling = {
      temperature: opts.temperature ?? 0, topP: opts.topP ?? 1, maxTokens: opts.maxTokens ?? 64,
      ...(opts.topK !== undefined ? { topK: opts.topK } : {}), ...(opts.minP !== undefined ? { minP: opts.minP } : {}),
      ...(opts.seed !== undefined ? { seed: opts.seed } : {}), ...(opts.ignoreEos ? { ignoreEos: true } : {}),
    };
    const done = (await runToCompletion(engine, [{ id: 'generate', promptIds, sampling }])).get('generate')!;
    if (done.reason === 'error') throw new Error(`generation failed: ${done.error}`);
    return { text: model.tokenizer.decode(done.tokens), tokens: done.tokens, promptTokens: promptIds.length, finishReason: done.reason };
  } finally {
    await engine.close();
    backend.dispose();
  }
}
