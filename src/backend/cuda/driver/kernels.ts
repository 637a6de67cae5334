// Finds and loads the ahead-of-time compiled kernels (dist/kernels/*.fatbin, built by
// `npm run build:kernels`) and looks up their entry points.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { ResidencyError } from '../../../errors.ts';
import type { CudaDriver } from './driver.ts';
import { ResourceScope } from './resource-scope.ts';

/** The products: weight format, rows per group (bucket), output features per warp, epilogue (kernels/step.cu). */
export const GEMV_ROWS = [1, 2, 4, 8, 16] as const;
export type GemvEpilogue = 'store' | 'add' | 'swiglu';
/** Name infix of a product's weight format: bf16 '', block FP8 'fp8_' and MXFP4 'mxfp4_'. */
export type WeightInfix = '' | 'fp8_' | 'mxfp4_';
export type GemvName = `op_gemv_${WeightInfix}b${(typeof GEMV_ROWS)[number]}_r${1 | 2}_${GemvEpilogue}`;
/** The batch-1 expert down product that adds its picks to the residual itself (gemv.cuh EPI_COMBINE). */
export type GemvCombineName = `op_gemv_${WeightInfix}b1_r${1 | 2 | 4}_combine`;
/** The batch-1 bf16 q | k | v product with its features split evenly over the grid (kernels/step.cu GEMV_EVEN_ENTRY). */
export type GemvEvenName = `op_gemv_b1_r${1 | 2}_store_even`;
export type GemmTcName = `op_gemm_tc_${WeightInfix}${GemvEpilogue}`;
export type AttendHeadDim = 32 | 64 | 128;
export type AttendName = `op_attend${'' | '_decode'}_hd${AttendHeadDim}_g${1 | 2 | 4 | 8 | 16}`;
const EPILOGUES = ['store', 'add', 'swiglu'] as const;
const INFIXES = ['', 'fp8_', 'mxfp4_'] as const;
const GEMV_NAMES = INFIXES.flatMap((w) => GEMV_ROWS.flatMap((b) => ([1, 2] as const).flatMap((r) => EPILOGUES.map((e): GemvName => `op_gemv_${w}b${b}_r${r}_${e}`))));
const GEMV_COMBINE_NAMES = INFIXES.flatMap((w) => ([1, 2, 4] as const).map((r): GemvCombineName => `op_gemv_${w}b1_r${r}_combine`));
const GEMV_EVEN_NAMES = ([1, 2] as const).map((r): GemvEvenName => `op_gemv_b1_r${r}_store_even`);
const GEMM_TC_NAMES = INFIXES.flatMap((w) => EPILOGUES.map((e): GemmTcName => `op_gemm_tc_${w}${e}`));
const ATTEND_NAMES = (['', '_decode'] as const).flatMap((v) => ([32, 64, 128] as const).flatMap((hd) => ([1, 2, 4, 8, 16] as const).map((g): AttendName => `op_attend${v}_hd${hd}_g${g}`)));
const STEP_KERNELS = [
  ...GEMV_NAMES, ...GEMV_COMBINE_NAMES, ...GEMV_EVEN_NAMES, ...GEMM_TC_NAMES, 'op_qk_norm_whole', 'op_qk_rope_kv', ...ATTEND_NAMES, 'op_attend_merge',
  'op_route_group', 'op_route_rows', 'op_group', 'op_residual_norm', 'op_argmax_rows', 'op_host_exchange', 'op_host_collect',
  'op_mla_norm_rope_kv', 'op_mla_q_absorb', 'op_mla_q_absorb_fp8', 'op_mla_attend', 'op_mla_o_absorb', 'op_mla_o_absorb_fp8',
] as const;

/** Kernel entry points by fatbin (one per kernels/<group>.cu): a step's kernels, and the finite checks at upload. */
export const KERNEL_GROUPS = {
  step: STEP_KERNELS,
  load: ['op_check_finite_bf16', 'op_check_finite_fp8'],
} as const;

export type KernelName = (typeof KERNEL_GROUPS)[keyof typeof KERNEL_GROUPS][number];
export type KernelGroup = keyof typeof KERNEL_GROUPS;

/**
 * Where the fatbins are: $RESIDENCY_KERNELS, next to a bundle (dist/kernels), the checkout's dist/kernels seen from
 * the compiled package (lib/), or from these sources (src/backend/cuda/driver/).
 */
export function kernelDirCandidates(): string[] {
  const c: string[] = [];
  const env = process.env['RESIDENCY_KERNELS'];
  if (env) c.push(env);
  for (const rel of ['./kernels/', '../dist/kernels/', '../../../../dist/kernels/']) c.push(fileURLToPath(new URL(rel, import.meta.url)));
  return c;
}

export function findKernelDir(): string {
  const dirs = kernelDirCandidates();
  for (const d of dirs) if (existsSync(join(d, 'step.fatbin'))) return d;
  throw new ResidencyError('NOT_AVAILABLE', `cuda backend: compiled kernels not found (looked in ${dirs.join(', ')}); run \`npm run build:kernels\` (needs nvcc)`);
}

export interface LoadedKernels {
  readonly fns: Map<KernelName, bigint>;
  readonly modules: Map<keyof typeof KERNEL_GROUPS, bigint>;
}

/**
 * Loads each group's fatbin as its own module; each module is recorded in `scope` as soon as it is loaded, so
 * the owner unloads them (also when a later one fails).
 */
export function loadKernelModules(d: CudaDriver, scope: ResourceScope, dir = findKernelDir()): LoadedKernels {
  const fns = new Map<KernelName, bigint>();
  const modules = new Map<keyof typeof KERNEL_GROUPS, bigint>();
  for (const [group, names] of Object.entries(KERNEL_GROUPS) as [KernelGroup, readonly KernelName[]][]) {
    const image = readFileSync(join(dir, `${group}.fatbin`));
    const mod = scope.acquire(`module ${group}.fatbin`, () => d.loadModule(image, `${group}.fatbin`), (m) => d.unloadModule(m));
    modules.set(group, mod);
    for (const n of names) {
      // One name, one kernel: a second module's entry of the same name would silently replace the first.
      if (fns.has(n)) throw new ResidencyError('INTERNAL', `kernel ${n} is defined in two kernel groups`);
      fns.set(n, d.getFunction(mod, n));
    }
  }
  return { fns, modules };
}

/** The kernels for the process's lifetime (GPU tests, benchmarks); a failed load unloads what it loaded. */
export function loadKernels(d: CudaDriver, dir = findKernelDir()): Map<KernelName, bigint> {
  const scope = new ResourceScope('kernel modules');
  try {
    return loadKernelModules(d, scope, dir).fns;
  } catch (e) {
    throw scope.unwind(e);
  }
}
