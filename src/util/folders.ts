// Folders named by flags (--residency-dir, --out): checked and made so that a bad path fails fast.
// Node 20's mkdirSync(path, { recursive: true }) never returns where mkdir answers ENOENT inside a folder
// that exists (procfs: mkdir('/proc/x') is ENOENT, '/proc' exists, so it retries forever); a flag pointing
// there would hang the command instead of failing. Kernel filesystems are refused by name with a clear
// error, and folders are made one level at a time, so any other such filesystem fails instead of hanging.
import { mkdirSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { ResidencyError } from '../errors.ts';

/** Kernel filesystems: nothing of ours is ever written there. /dev/shm is a plain tmpfs and allowed. */
const KERNEL_FILESYSTEMS = ['/proc', '/sys', '/dev'] as const;
const ALLOWED_UNDER_KERNEL = ['/dev/shm'] as const;

const under = (path: string, root: string): boolean => path === root || path.startsWith(`${root}/`);

/** stat, or undefined where nothing is (ENOENT, or ENOTDIR: a file where a parent folder should be). */
function statOrNone(p: string): ReturnType<typeof statSync> | undefined {
  try {
    return statSync(p, { throwIfNoEntry: false });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw err;
  }
}

/** The deepest ancestor of `abs` (itself included) that exists. */
function existingAncestor(abs: string): string {
  let p = abs;
  while (statOrNone(p) === undefined) {
    const up = dirname(p);
    if (up === p) break;
    p = up;
  }
  return p;
}

/**
 * Refuses a folder path (existing or to be made) that lies on a kernel filesystem, symbolic links in its
 * existing part followed; returns it absolute. Creates nothing, so it can run before a slow model load.
 */
export function checkFolderPath(path: string, flag: string): string {
  if (path.trim() === '') throw new ResidencyError('BAD_ARGUMENT', `${flag}: expected a folder path, got ''`);
  const abs = resolve(path);
  const base = existingAncestor(abs);
  let real = abs;
  try {
    real = join(realpathSync(base), relative(base, abs));
  } catch {
    // Unresolvable links: judge the path as written; making the folder reports the real problem.
  }
  for (const p of new Set([abs, real])) {
    const kernel = KERNEL_FILESYSTEMS.find((root) => under(p, root));
    if (kernel && !ALLOWED_UNDER_KERNEL.some((ok) => under(p, ok))) {
      throw new ResidencyError('BAD_ARGUMENT',
        `${flag} ${path}: ${p === abs ? '' : `(${p}) `}is on the kernel filesystem ${kernel}; expected a folder on a real disk (or /dev/shm)`);
    }
  }
  return abs;
}

/** checkFolderPath, then makes the folder and any missing parents, one level at a time; returns it absolute. */
export function makeFolder(path: string, flag: string): string {
  const abs = checkFolderPath(path, flag);
  const missing: string[] = [];
  for (let p = abs; statOrNone(p) === undefined; p = dirname(p)) {
    missing.push(p);
    if (dirname(p) === p) break;
  }
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir); // not recursive: an ENOENT here is an answer, not a reason to retry
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST' && statOrNone(dir)?.isDirectory()) continue;
      throw new ResidencyError('BAD_ARGUMENT', `${flag} ${path}: cannot make folder ${dir}: ${(err as Error).message}`, { cause: err });
    }
  }
  if (!statSync(abs).isDirectory()) throw new ResidencyError('BAD_ARGUMENT', `${flag} ${path}: exists and is not a folder`);
  return abs;
}
