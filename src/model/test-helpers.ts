// Shared by the model tests: temp folders and an assertion that a load is refused with a given code.

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ResidencyError } from '../errors.ts';
import type { ErrorCode } from '../errors.ts';
import { dequantize } from './quant.ts';
import type { ModelWeights } from './weights.ts';

/** The repo root (tests run from it under `npm test`, but resolve from this file to be sure). */
export const REPO_ROOT = resolve(new URL('../..', import.meta.url).pathname);
export const SHIPPED_MODEL = join(REPO_ROOT, 'models', 'tiny-moe');

export async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'moe-model-test-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Asserts `p` rejects with a ResidencyError of `code` whose message matches every pattern. */
export async function rejectsWith(p: Promise<unknown> | (() => unknown), code: ErrorCode, ...patterns: RegExp[]): Promise<ResidencyError> {
  let err: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ResidencyError, `expected ResidencyError ${code}, got ${err === undefined ? 'success' : String(err)}`);
  assert.equal(err.code, code, err.message);
  for (const re of patterns) assert.match(err.message, re);
  return err;
}

/** Every float32 array of the weights (the tied lm_head once). */
export function weightArrays(w: ModelWeights): Float32Array[] {
  const out = [dequantize(w.embed), w.finalNorm, ...(w.lmHead === w.embed ? [] : [dequantize(w.lmHead)])];
  for (const l of w.layers) {
    out.push(l.inputNorm, ...[l.qProj, l.kProj, l.vProj, l.oProj].map(dequantize), l.qNorm, l.kNorm, l.postAttnNorm, l.router);
    for (const e of l.experts) out.push(dequantize(e.gate), dequantize(e.up), dequantize(e.down));
  }
  return out;
}
