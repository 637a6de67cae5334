// --gpu-memory-utilization and --max-model-len, shared by serve and generate (as vLLM spells them): the
// budget the cuda backend sizes itself in, and the positions a sequence may hold (which also bounds requests;
// applied to the spec by model/max-model-len.ts).
import { ResidencyError } from '../errors.ts';
import { checkUtilization } from '../backend/cuda/memory/memory.ts';
import { MAX_PARTS } from '../backend/cuda/host-lane/split.ts';

export const MEMORY_OPTIONS = {
  'gpu-memory-utilization': { type: 'string' },
  'max-model-len': { type: 'string' },
  'host-experts': { type: 'string' },
  'host-expert-share': { type: 'string' },
  'host-expert-parts': { type: 'string' },
} as const;

export const MEMORY_HELP = `  --gpu-memory-utilization F  cuda: share of the GPU's memory for weights, KV cache and workspace (default 0.9);
                       a model that does not fit is refused with what would
  --max-model-len N    positions a sequence may hold, prompt + output (default: the model's max_position_embeddings);
                       cuda reserves the KV cache for N x the running batch
  --host-experts N|auto cuda: N host threads ('auto': the CPUs less 2) compute a share of each layer's cold
                       experts at decode steps of up to 32 picks (4 rows at top-8), from host memory, beside
                       the GPU (bf16, block-FP8 or MXFP4 experts; same bits)
  --host-expert-share F of a layer's distinct cold experts, the share the host computes, rounded up to a part: a
                       fixed split (default: the split is chosen from the host's and the GPU's times as measured
                       while serving)
  --host-expert-parts N the parts an expert counts in the split, 1..4 (default 4): one expert a layer may be
                       split between the host and the GPU in quarters; 1 sends whole experts only`;

export interface MemoryFlags {
  readonly gpuMemoryUtilization?: number;
  readonly maxModelLen?: number;
  readonly hostExperts?: HostExpertFlags;
}

/** --host-experts, --host-expert-share and --host-expert-parts: the host expert lane's threads (absent: the default), share and parts. */
export interface HostExpertFlags {
  readonly threads?: number;
  readonly share?: number;
  readonly parts?: number;
}

type FlagValues = {
  'gpu-memory-utilization'?: string | boolean; 'max-model-len'?: string | boolean; 'host-experts'?: string | boolean; 'host-expert-share'?: string | boolean;
  'host-expert-parts'?: string | boolean;
};

export function parseMemoryFlags(values: FlagValues): MemoryFlags {
  const out: { gpuMemoryUtilization?: number; maxModelLen?: number; hostExperts?: HostExpertFlags } = {};
  const u = values['gpu-memory-utilization'];
  if (typeof u === 'string') {
    const n = Number(u);
    if (u.trim() === '') throw new ResidencyError('BAD_ARGUMENT', `--gpu-memory-utilization '${u}': expected a fraction in (0, 1]`);
    out.gpuMemoryUtilization = checkUtilization(n);
  }
  const m = values['max-model-len'];
  if (typeof m === 'string') {
    const n = Number(m);
    if (m.trim() === '' || !Number.isInteger(n) || n < 2) throw new ResidencyError('BAD_ARGUMENT', `--max-model-len '${m}': expected an integer >= 2`);
    out.maxModelLen = n;
  }
  const h = values['host-experts'], share = values['host-expert-share'], parts = values['host-expert-parts'];
  if (typeof share === 'string' && typeof h !== 'string') throw new ResidencyError('BAD_ARGUMENT', '--host-expert-share needs --host-experts');
  if (typeof parts === 'string' && typeof h !== 'string') throw new ResidencyError('BAD_ARGUMENT', '--host-expert-parts needs --host-experts');
  if (typeof h === 'string') {
    const n = Number(h);
    if (h.trim() !== 'auto' && (h.trim() === '' || !Number.isInteger(n) || n < 1 || n > 1024)) {
      throw new ResidencyError('BAD_ARGUMENT', `--host-experts '${h}': expected a thread count in 1..1024 or 'auto'`);
    }
    let f: number | undefined;
    if (typeof share === 'string') {
      f = Number(share);
      if (share.trim() === '' || !(f > 0 && f <= 1)) throw new ResidencyError('BAD_ARGUMENT', `--host-expert-share '${share}': expected a fraction in (0, 1]`);
    }
    let p: number | undefined;
    if (typeof parts === 'string') {
      p = Number(parts);
      if (parts.trim() === '' || !Number.isInteger(p) || p < 1 || p > MAX_PARTS) throw new ResidencyError('BAD_ARGUMENT', `--host-expert-parts '${parts}': expected an integer in 1..${MAX_PARTS}`);
    }
    out.hostExperts = { ...(h.trim() === 'auto' ? {} : { threads: n }), ...(f !== undefined ? { share: f } : {}), ...(p !== undefined ? { parts: p } : {}) };
  }
  return out;
}
