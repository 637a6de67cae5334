// Several sequences for one HTTP request (n choices, several prompts): run side by side in the engine,
// their items merged as they come, or collected to the end.
import type { RelayContext, RelayItem, RelayJob, RelayToken } from './relay.ts';
import { relay } from './relay.ts';

type Step = { i: number; r?: IteratorResult<RelayItem, void>; err?: unknown };

/**
 * Yields [choice index, item] from every job as they arrive; each job ends with its own 'done'. A failing
 * job fails the whole request; leaving early (or `signal`) cancels every sequence still running.
 */
export async function* mergeRelays(ctx: RelayContext, jobs: readonly RelayJob[], signal: AbortSignal): AsyncGenerator<[number, RelayItem], void, undefined> {
  const its = jobs.map((j) => relay(ctx, j, signal));
  const next = (i: number): Promise<Step> => its[i]!.next().then((r) => ({ i, r }), (err: unknown) => ({ i, err }));
  const pending = new Map<number, Promise<Step>>(its.map((_, i) => [i, next(i)]));
  try {
    while (pending.size > 0) {
      const s = await Promise.race(pending.values());
      if (s.err !== undefined) throw s.err;
      if (s.r!.done) {
        pending.delete(s.i);
        continue;
      }
      pending.set(s.i, next(s.i));
      yield [s.i, s.r!.value];
    }
  } finally {
    // Errors of the others after the first are settled here (caught in next()), never unhandled.
    for (const it of its) void it.return(undefined).catch(() => {});
  }
}

export interface ChoiceResult {
  text: string;
  tokens: RelayToken[];
  finishReason: 'stop' | 'length';
  promptTokens: number;
  completionTokens: number;
}

/** Runs every job to its end; results in job order. */
export async function collectChoices(ctx: RelayContext, jobs: readonly RelayJob[], signal: AbortSignal): Promise<ChoiceResult[]> {
  const out: ChoiceResult[] = jobs.map(() => ({ text: '', tokens: [], finishReason: 'length', promptTokens: 0, completionTokens: 0 }));
  for await (const [i, it] of mergeRelays(ctx, jobs, signal)) {
    const c = out[i]!;
    if (it.type === 'text') {
      c.text += it.text;
      if (it.tokens) c.tokens.push(...it.tokens);
    } else {
      c.finishReason = it.finishReason;
      c.promptTokens = it.promptTokens;
      c.completionTokens = it.completionTokens;
    }
  }
  return out;
}

export interface Usage { prompt_tokens: number; completion_tokens: number; total_tokens: number }

/** OpenAI's usage for n choices of each prompt: every prompt counted once, every choice's tokens counted. */
export function usageOfChoices(done: readonly { promptTokens: number; completionTokens: number }[], n: number): Usage {
  let prompt = 0;
  let completion = 0;
  done.forEach((d, i) => {
    if (i % n === 0) prompt += d.promptTokens;
    completion += d.completionTokens;
  });
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}
