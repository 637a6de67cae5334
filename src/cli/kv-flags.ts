// The KV cache and scheduler flags of serve and generate, with vLLM's names: the paged pool's block size, dtype and
// size, prefix caching, the running batch and a step's token budget. And the boot line that says what was built.
import { ResidencyError } from '../errors.ts';
import type { KvCacheDtype } from '../backend/backend.ts';
import { parseKvCacheDtype } from '../backend/kv-dtype.ts';
import type { SchedulerConfig } from '../engine/scheduler.ts';
import type { KvCacheStats } from '../engine/types.ts';

export const KV_OPTIONS = {
  'block-size': { type: 'string' },
  'kv-cache-dtype': { type: 'string' },
  'kv-cache-memory': { type: 'string' },
  'kv-cache-tokens': { type: 'string' },
  'enable-prefix-caching': { type: 'boolean' },
  'no-enable-prefix-caching': { type: 'boolean' },
  'max-num-seqs': { type: 'string' },
  'max-running': { type: 'string' },
  'max-num-batched-tokens': { type: 'string' },
} as const;

export const KV_HELP = `  --block-size N       positions a KV cache block holds (default 16)
  --kv-cache-dtype D   auto|float32|bfloat16|fp8 (fp8 = e4m3, scale 1): how keys and values are stored; auto = bfloat16
                       on cuda, float32 on cpu (the spec; bf16 and fp8 are rounded exactly as the device stores them)
  --kv-cache-memory B  bytes of KV cache (suffixes K, M, G, KiB, MiB, GiB); or --kv-cache-tokens N positions;
                       cuda default: what the weights and the hot bank leave of the budget (at least --max-model-len x
                       min(4, --max-num-seqs) positions); with --hot H unset, a fixed size gives the hot bank the rest;
                       cpu default: 4 x --max-model-len positions, at most 512 MiB
  --enable-prefix-caching / --no-enable-prefix-caching
                       reuse the KV blocks of prompt prefixes other requests computed (default on)
  --max-num-seqs N     sequences in the running batch at most (alias --max-running; default: as many as the KV
                       pool has blocks, up to 256)
  --max-num-batched-tokens N  tokens a step feeds at most: decode first, prefill chunks in the rest (default 2048)`;

/** What the KV flags ask for (nothing given: the defaults). */
export interface KvFlags {
  readonly kvCache: { readonly blockSize?: number; readonly dtype?: KvCacheDtype | 'auto'; readonly tokens?: number; readonly bytes?: number };
  readonly prefixCaching?: boolean;
  readonly scheduler: Partial<Pick<SchedulerConfig, 'maxRunning' | 'maxStepTokens'>>;
}

type Values = { [K in keyof typeof KV_OPTIONS]?: string | boolean };

function int(flag: string, text: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min || n > max) throw new ResidencyError('BAD_ARGUMENT', `--${flag} '${text}': expected an integer in ${min}..${max}`);
  return n;
}

const UNITS: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30 };

/** Bytes as `--kv-cache-memory` takes them: an integer, or a number with K, M, G (10^3 ...) or KiB, MiB, GiB. */
export function parseBytes(flag: string, text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmg](?:ib)?)?\s*$/i.exec(text);
  const n = m ? Math.floor(Number(m[1]) * UNITS[(m[2] ?? '').toLowerCase()]!) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) throw new ResidencyError('BAD_ARGUMENT', `--${flag} '${text}': expected bytes, e.g. 4294967296 or 4GiB`);
  return n;
}

export function parseKvFlags(v: Values): KvFlags {
  const s = (k: keyof typeof KV_OPTIONS): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined);
  if (v['enable-prefix-caching'] === true && v['no-enable-prefix-caching'] === true) {
    throw new ResidencyError('BAD_ARGUMENT', 'give --enable-prefix-caching or --no-enable-prefix-caching, not both');
  }
  if (s('kv-cache-memory') !== undefined && s('kv-cache-tokens') !== undefined) {
    throw new ResidencyError('BAD_ARGUMENT', 'give --kv-cache-memory BYTES or --kv-cache-tokens N, not both');
  }
  const seqs = s('max-num-seqs');
  const running = s('max-running');
  if (seqs !== undefined && running !== undefined && seqs !== running) {
    throw new ResidencyError('BAD_ARGUMENT', `--max-num-seqs ${seqs} and --max-running ${running}: one flag (--max-running is its alias)`);
  }
  const maxRunning = seqs ?? running;
  const dtype = s('kv-cache-dtype');
  const blockSize = s('block-size');
  const bytes = s('kv-cache-memory');
  const tokens = s('kv-cache-tokens');
  const batched = s('max-num-batched-tokens');
  return {
    kvCache: {
      ...(blockSize !== undefined ? { blockSize: int('block-size', blockSize, 1, 1024) } : {}),
      // 'auto' stays 'auto' here: each backend resolves it to its own default.
      ...(dtype !== undefined ? { dtype: dtype.trim().toLowerCase() === 'auto' ? 'auto' as const : parseKvCacheDtype(dtype, 'float32') } : {}),
      ...(bytes !== undefined ? { bytes: parseBytes('kv-cache-memory', bytes) } : {}),
      ...(tokens !== undefined ? { tokens: int('kv-cache-tokens', tokens, 1) } : {}),
    },
    ...(v['enable-prefix-caching'] === true ? { prefixCaching: true } : v['no-enable-prefix-caching'] === true ? { prefixCaching: false } : {}),
    scheduler: {
      ...(maxRunning !== undefined ? { maxRunning: int(seqs !== undefined ? 'max-num-seqs' : 'max-running', maxRunning, 1) } : {}),
      ...(batched !== undefined ? { maxStepTokens: int('max-num-batched-tokens', batched, 1) } : {}),
    },
  };
}

const GiB = 2 ** 30;
const MiB = 2 ** 20;

/** The boot line for a paged pool: blocks, positions that fit, dtype, memory, prefix caching, the batch limits. */
export function kvBootLine(kv: KvCacheStats, sched: Pick<SchedulerConfig, 'maxRunning' | 'maxStepTokens'>): string {
  const bytes = kv.numBlocks * kv.bytesPerBlock;
  const mem = bytes >= GiB ? `${(bytes / GiB).toFixed(2)} GiB` : `${(bytes / MiB).toFixed(1)} MiB`;
  return `KV cache: ${kv.numBlocks.toLocaleString('en-US')} blocks of ${kv.blockSize} positions = ${(kv.numBlocks * kv.blockSize).toLocaleString('en-US')} positions, ` +
    `${kv.dtype}, ${mem}; prefix caching ${kv.prefixCaching ? 'on' : 'off'}; up to ${sched.maxRunning} sequences, ${sched.maxStepTokens} tokens a step`;
}
