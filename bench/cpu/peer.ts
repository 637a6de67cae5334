// llama.cpp beside us (issue 18): its own benchmark tools on a GGUF of the same checkpoint, run as child
// processes of this benchmark so both sides share the machine's state (alternating rounds, same load):
// llama-bench for prefill (pp) and decode at batch 1 (tg), llama-batched-bench for decode at batch B.
// Build the peer beside the repo (not in it): cmake --build build --target llama-bench llama-batched-bench.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface PeerRun {
  readonly threads: number;
  /** Prompt tokens for prefill, and generated tokens for decode. */
  readonly prompt: number;
  readonly gen: number;
}

export interface PeerFigures {
  /** Prefill tok/s over `prompt` tokens (llama-bench pp). */
  readonly pp: number;
  /** Decode tok/s at batch 1 (llama-bench tg). */
  readonly tg: number;
  /** Decode tok/s at batch `batch` (llama-batched-bench S_TG), when that tool is beside llama-bench. */
  readonly tgBatch?: { readonly batch: number; readonly tokS: number };
}

function run(bin: string, args: string[]): string {
  const r = spawnSync(bin, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`${bin}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${bin} ${args.join(' ')} exited ${r.status}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  return r.stdout;
}

/** llama-bench's JSON (an array of tests): the mean tok/s of the pp test and of the tg test. */
export function parseLlamaBench(json: string): { pp: number; tg: number } {
  const tests = JSON.parse(json) as { n_prompt: number; n_gen: number; avg_ts: number }[];
  const pp = tests.find((t) => t.n_prompt > 0 && t.n_gen === 0);
  const tg = tests.find((t) => t.n_gen > 0 && t.n_prompt === 0);
  if (!pp || !tg) throw new Error(`llama-bench output has no pp or no tg test: ${json.slice(0, 200)}`);
  return { pp: pp.avg_ts, tg: tg.avg_ts };
}

/** llama-batched-bench's JSONL: decode tok/s (speed_tg) of the line with `pl` sequences. */
export function parseBatchedBench(jsonl: string, pl: number): number {
  for (const line of jsonl.split('\n')) {
    if (!line.startsWith('{')) continue;
    const j = JSON.parse(line) as { pl: number; speed_tg: number };
    if (j.pl === pl) return j.speed_tg;
  }
  throw new Error(`llama-batched-bench output has no line for ${pl} sequences: ${JSON.stringify(jsonl.slice(0, 300))}`);
}

/** One round of the peer: pp + tg at batch 1 (llama-bench, 1 repetition), and tg at `batch` when asked. */
export function runPeer(llamaBench: string, gguf: string, o: PeerRun, batch?: number): PeerFigures {
  if (!existsSync(llamaBench)) throw new Error(`--peer ${llamaBench}: no such file (build llama.cpp's llama-bench beside the repo)`);
  if (!existsSync(gguf)) throw new Error(`--peer-model ${gguf}: no such file`);
  const bench = parseLlamaBench(run(llamaBench, ['-m', gguf, '-p', String(o.prompt), '-n', String(o.gen), '-t', String(o.threads), '-r', '1', '-o', 'json']));
  const batched = join(dirname(llamaBench), 'llama-batched-bench');
  if (batch === undefined || batch <= 1 || !existsSync(batched)) return bench;
  const args = ['-m', gguf, '-c', String(batch * (o.prompt + o.gen) + 64), '-b', '2048', '-ub', '512', '-npp', String(o.prompt), '-ntg', String(o.gen),
    '-npl', String(batch), '-t', String(o.threads), '-tb', String(o.threads), '--output-format', 'jsonl'];
  // It has exited 0 without its line, and the same command then ran fine: one more try before failing.
  let out = run(batched, args);
  if (!out.split('\n').some((l) => l.startsWith('{'))) out = run(batched, args);
  return { ...bench, tgBatch: { batch, tokS: parseBatchedBench(out, batch) } };
}
