// Token log-probabilities in OpenAI's two shapes: the legacy completions object and chat's content list.
import type { RelayToken } from './relay.ts';
import type { ServerTokenizer } from './types.ts';

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/** `offset`: where the first token's text starts in the choice's text (after an echoed prompt). */
export function completionLogprobs(tokens: readonly RelayToken[], tok: ServerTokenizer, offset: number, echoIds: readonly number[] = []): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = 0;
  // An echoed prompt's tokens carry no log-probabilities (the backend returns logits for the last position only).
  for (const id of echoIds) {
    const t = tok.decode([id]);
    out.tokens.push(t); out.token_logprobs.push(null); out.top_logprobs.push(null); out.text_offset.push(at);
    at += t.length;
  }
  at = offset;
  for (const t of tokens) {
    const text = tok.decode([t.id]);
    out.tokens.push(text);
    out.token_logprobs.push(t.logprob ?? null);
    out.top_logprobs.push(t.top ? Object.fromEntries(t.top.map((x) => [tok.decode([x.id]), x.logprob])) : null);
    out.text_offset.push(at);
    at += text.length;
  }
  return out;
}

export interface ChatTokenLogprob { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string; logprob: number; bytes: number[] }[] }

const bytesOf = (s: string) => [...Buffer.from(s, 'utf8')];

export function chatLogprobs(tokens: readonly RelayToken[], tok: ServerTokenizer, top: number): { content: ChatTokenLogprob[]; refusal: null } {
  return {
    content: tokens.map((t) => {
      const token = tok.decode([t.id]);
      return {
        token, logprob: t.logprob ?? 0, bytes: bytesOf(token),
        top_logprobs: (t.top ?? []).slice(0, top).map((x) => { const s = tok.decode([x.id]); return { token: s, logprob: x.logprob, bytes: bytesOf(s) }; }),
      };
    }),
    refusal: null,
  };
}
