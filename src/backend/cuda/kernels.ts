// Finds and loads the ahead-of-time compiled kernels (dist/kernels/*.fatbin, built by
// `npm run build:kernels`) and looks up their entry points.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { ResidencyError } from '../../errors.ts';
import type { CudaDriver } from './driver.ts';

/** Kernel entry points by fatbin (one per kernels/<group>.cu). */
export const KERNEL_GROUPS = {
  layer: ['decode_layers', 'attn_route', 'lm_head_argmax'],
  moe: ['expert_ffn'],
  ops: ['op_embed', 'op_gemm_bf16', 'op_rmsnorm', 'op_headnorm_rope', 'op_route'],
} as const;

export type KernelName = (typeof KERNEL_GROUPS)[keyof typeof KERNEL_GROUPS][number];

/** Where the fatbins are: $RESIDENCY_KERNELS, next to a bundle (dist/kernels), or the repo's dist/kernels. */
export function kernelDirCandidates(): string[] {
  const c: string[] = [];
  const env = process.env['RESIDENCY_KERNELS'];
  if (env) c.push(env);
  c.push(fileURLToPath(new URL('./kernels/', import.meta.url)));
  c.push(fileURLToPath(new URL('../../../dist/kernels/', import.meta.url)));
  return c;
}

export function findKernelDir(): string {
  const dirs = kernelDirCandidates();
  for (const d of dirs) if (existsSync(join(d, 'layer.fatbin'))) return d;
  throw new ResidencyError('NOT_AVAILABLE', `cuda backend: compiled kernels not found (looked in ${dirs.join(', ')}); run \`npm run build:kernels\` (needs nvcc)`);
}

export function loadKernels(d: CudaDriver, dir = findKernelDir()): Map<KernelName, bigint> {
  const fns = new Map<KernelName, bigint>();
  for (const [group, names] of Object.entries(KERNEL_GROUPS)) {
    const image = readFileSync(join(dir, `${group}.fatbin`));
    const mod = d.loadModule(image, `${group}.fatbin`);
    for (const n of names) fns.set(n, d.getFunction(mod, n));
  }
  return fns;
}
