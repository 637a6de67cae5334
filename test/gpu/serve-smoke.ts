// Serve smoke on any backend: the server started in-process through src/server/boot.ts (the code
// `residency serve` runs), 49 of 64 hot, adapting on a fast clock so rows move while requests run. Greedy
// /v1/completions for three parity prompts (token ids) must equal the backend's own greedy text and the
// parity reference; one streamed request; /v1/residency and /metrics must answer.
import { createBackend, type BackendName } from '../../src/backend/registry.ts';
import { generateGreedy } from '../../src/engine/complete.ts';
import type { LoadedModel } from '../../src/model/load.ts';
import { startServing } from '../../src/server/boot.ts';
import { PICKED, type ParityCase } from './churn.ts';

export interface ServeSmokeResult {
  /** Per prompt: backend greedy tokens == parity.json tokens, HTTP text == backend greedy text. */
  prompts: { domain: string; tokensEqualReference: boolean; textEqual: boolean; textChars: number; completionTokens: number }[];
  streamedEqual: boolean;
  streamedDone: boolean;
  concurrentEqual: boolean;
  residencyStatus: number;
  residency: { frozen: boolean; applied: number; refused: number; drains: number; step: number; coldShare: unknown };
  metricsStatus: number;
  metricsHasColdShare: boolean;
  swapsApplied: number;
}

const post = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** The concatenated text of an SSE completion stream, and whether [DONE] came. */
async function streamText(res: Response): Promise<{ text: string; done: boolean }> {
  const raw = await res.text();
  let text = '';
  let done = false;
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const data = line.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    const c = JSON.parse(data) as { choices?: { text?: string }[] };
    for (const ch of c.choices ?? []) text += ch.text ?? '';
  }
  return { text, done };
}

export async function runServeSmoke(backend: BackendName, model: LoadedModel, cases: ParityCase[], opts: { tokens?: number; log?: (s: string) => void } = {}): Promise<ServeSmokeResult> {
  const log = opts.log ?? ((s: string) => console.log(s));
  const N = opts.tokens ?? 40;
  const picked = PICKED.map((i) => cases[i]!);
  const eos = model.tokenizer.eosTokenIds;
  // The backend's own greedy output (all hot), outside any engine or server.
  const ref = await createBackend(backend, model);
  const want = picked.map((c) => generateGreedy(ref, c.prompt_ids, N));
  ref.dispose();
  const wantText = want.map((t) => model.tokenizer.decode(t.filter((x) => !eos.includes(x))));

  const s = await startServing({
    modelDir: model.dir, model, backend, hot: 49, adapt: true, port: 0, host: '127.0.0.1', log: (m) => log(`# serve: ${m}`),
    budgets: { drain_every: 8, half_life_tokens: 32, min_average: 0.5, move_cost_picks: 0, swaps_per_layer_per_drain: 4 },
  });
  try {
    const url = s.server.url;
    const prompts: ServeSmokeResult['prompts'] = [];
    for (const [i, c] of picked.entries()) {
      const r = await post(`${url}/v1/completions`, { prompt: c.prompt_ids, max_tokens: N, temperature: 0, ignore_eos: true });
      const j = (await r.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
      const text = j.choices?.[0]?.text ?? '';
      prompts.push({
        domain: c.domain,
        tokensEqualReference: want[i]!.join() === c.steps.slice(0, N).map((x) => x.token).join(),
        textEqual: text === wantText[i],
        textChars: text.length,
        completionTokens: j.usage?.completion_tokens ?? -1,
      });
      log(`# serve ${c.domain}: HTTP ${r.status}, ${text.length} chars, equal ${text === wantText[i]}: ${JSON.stringify(text.slice(0, 60))}`);
    }
    const st = await streamText(await post(`${url}/v1/completions`, { prompt: picked[1]!.prompt_ids, max_tokens: N, temperature: 0, ignore_eos: true, stream: true }));
    const conc = await Promise.all(picked.map(async (c) => ((await (await post(`${url}/v1/completions`, { prompt: c.prompt_ids, max_tokens: N, temperature: 0, ignore_eos: true })).json()) as { choices: { text: string }[] }).choices[0]!.text));
    const rr = await fetch(`${url}/v1/residency`);
    const res = (await rr.json()) as { controller?: { frozen: boolean; drains: number }; swaps?: { applied: number; refused: number }; step?: number; cold_share?: unknown };
    const mr = await fetch(`${url}/metrics`);
    const metrics = await mr.text();
    const stats = s.driver?.controller.stats;
    return {
      prompts, streamedEqual: st.text === wantText[1], streamedDone: st.done,
      concurrentEqual: conc.every((t, i) => t === wantText[i]),
      residencyStatus: rr.status,
      residency: { frozen: res.controller?.frozen ?? true, applied: res.swaps?.applied ?? -1, refused: res.swaps?.refused ?? -1, drains: res.controller?.drains ?? -1, step: res.step ?? -1, coldShare: res.cold_share },
      metricsStatus: mr.status, metricsHasColdShare: metrics.includes('residency_cold_share'),
      swapsApplied: stats?.applied ?? 0,
    };
  } finally {
    await s.close();
  }
}
