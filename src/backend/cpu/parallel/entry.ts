// Where the CPU worker's code is: worker.ts next to this file when running from TypeScript sources
// (started with tsx's loader), or cpu-worker.mjs next to the bundle (dist/) when running bundled.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ResidencyError } from '../../../errors.ts';

/** The bundle's worker file name (scripts/build.mjs: src/backend/cpu/parallel/worker.ts -> dist/cpu-worker.mjs). */
export const BUNDLED_WORKER = 'cpu-worker.mjs';

/**
 * The file a worker starts from and what it passes in workerData.entry: from sources, worker-boot.mjs
 * (registers tsx in the worker, then imports worker.ts: Node 20 workers do not reliably take tsx from
 * --import); bundled, cpu-worker.mjs itself.
 */
export function workerEntry(): { url: URL; entry: string } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) return { url: new URL('./worker-boot.mjs', here), entry: new URL('./worker.ts', here).href };
  const url = new URL(`./${BUNDLED_WORKER}`, here);
  if (!existsSync(fileURLToPath(url))) {
    throw new ResidencyError(
      'NOT_AVAILABLE',
      `cpu threads: the worker bundle ${fileURLToPath(url)} is missing (build it next to the bundle, or use threads 1)`,
    );
  }
  return { url, entry: url.href };
}

/** Whether worker threads can start here (sources, or a bundle with its worker file). */
export function workersAvailable(): boolean {
  try {
    workerEntry();
    return true;
  } catch {
    return false;
  }
}
