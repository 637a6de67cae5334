// Test-only helpers shared by the CPU backend's bit-identity suites (maps, threads, SIMD): a random map, and
// a recorded run (every step's output bytes, then counter and digest) to compare configurations byte for byte
// (assertSameRecord);
// a checkpoint copy with a few bytes of one tensor overwritten (refusal tests).
import assert from 'node:assert/strict';
import { closeSync, copyFileSync, mkdtempSync, openSync, readdirSync, readFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '../backend.ts';
import { DirectSequences } from '../sequences.ts';
import { moeLayerCount, type ModelSpec } from '../../model/spec.ts';
import type { RowMap } from '../../residency/rowmap.ts';
import type { ModelWeights } from '../../model/weights.ts';
import { createCpuBackend, type CpuBackendOptions } from './cpu-backend.ts';
import { mulberry32, shuffled } from '../../util/rng.ts';

/** Bytes of a typed array (bit-level comparison: -0 vs 0 and NaN payloads count). */
export const bytesOf = (a: Float32Array | Int32Array | Uint32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** A map with `hot` experts per layer, each layer's experts in a seeded random order. */
export function randomMap(spec: ModelSpec, hot: number, seed: number): RowMap {
  const rand = mulberry32(seed);
  const layers = moeLayerCount(spec);
  const layers_map = Array.from({ length: layers }, () => {
    const ids = shuffled(Array.from({ length: spec.numExperts }, (_, e) => e), rand);
    return { hot: ids.slice(0, hot), cold: ids.slice(hot) };
  });
  return { version: 1, model: spec.name, layers, experts: spec.numExperts, hot_per_layer: hot, layers_map };
}

/** What a recorded run does between and in its decode steps. */
export interface RunSchedule {
  /** Random hot/cold row swaps before each decode step (when the map has both banks). */
  readonly swapsPerStep: number;
  readonly seed: number;
  /** The token fed at decode step `i` to sequence `s` whose prompt starts with `first`. */
  readonly token: (first: number, i: number, s: number) => number;
  /** Whether decode step `i` is counted. */
  readonly counted: (i: number) => boolean;
}

export interface RunRecord {
  /** Per step: logits, routing and routing weights, as bytes. */
  readonly steps: Buffer[];
  readonly counter: Buffer;
  readonly digest: string;
}

/**
 * For each batch of prompts in turn: prefill them (one chunk each), then `decode` steps on the schedule,
 * swapping random rows between steps; records every step's outputs.
 */
export function recordRun(b: Backend, batches: number[][][], decode: number, sched: RunSchedule): RunRecord {
  const { spec } = b;
  const steps: Buffer[] = [];
  const keep = (o: ReturnType<Backend['forward']>): void => {
    steps.push(Buffer.concat([bytesOf(o.logits), bytesOf(o.routing!), bytesOf(o.routingWeights!)]));
  };
  const rand = mulberry32(sched.seed);
  const hot = b.banks.hotPerLayer;
  const cold = spec.numExperts - hot;
  const seqs = new DirectSequences(b);
  for (const prompts of batches) {
    prompts.forEach((p, s) => seqs.open(s, p.length + decode));
    keep(seqs.forward({ chunks: prompts.map((p, s) => ({ seq: s, tokens: p, startPos: 0 })), count: true, recordRouting: true }));
    for (let i = 0; i < decode; i++) {
      if (hot > 0 && cold > 0) {
        for (let k = 0; k < sched.swapsPerStep; k++) {
          b.banks.swapRows(Math.floor(rand() * b.banks.layers), Math.floor(rand() * hot), Math.floor(rand() * cold));
        }
      }
      const chunks = prompts.map((p, s) => ({ seq: s, tokens: [sched.token(p[0]!, i, s) % spec.vocabSize], startPos: p.length + i }));
      keep(seqs.forward({ chunks, count: sched.counted(i), recordRouting: true }));
    }
    seqs.closeAll();
  }
  return { steps, counter: bytesOf(b.readCounter()), digest: b.banks.digest() };
}

/**
 * recordRun on a fresh CPU backend over (spec, weights, opts), its workers started first, disposed after; with
 * whether it ran the SIMD kernel.
 */
export async function recordFresh(spec: ModelSpec, weights: ModelWeights, opts: CpuBackendOptions, batches: number[][][], decode: number, sched: RunSchedule): Promise<RunRecord & { simd: boolean }> {
  const b = createCpuBackend(spec, weights, opts);
  try {
    await b.ready();
    return { ...recordRun(b, batches, decode, sched), simd: b.simd };
  } finally {
    b.dispose();
  }
}

/** Two recorded runs agree bit for bit: every step's outputs, the counter, the digest after the swaps. */
export function assertSameRecord(got: RunRecord, want: RunRecord, label = ''): void {
  const at = label ? `${label}: ` : '';
  assert.equal(got.steps.length, want.steps.length, `${at}steps`);
  got.steps.forEach((s, i) => assert.ok(s.equals(want.steps[i]!), `${at}step ${i} bit-identical`));
  assert.ok(got.counter.equals(want.counter), `${at}counter`);
  assert.equal(got.digest, want.digest, `${at}digest after swaps`);
}

/** A copy (in a fresh temporary folder) of checkpoint `src` with `bytes` written over `tensor`'s stored bytes from `at`. */
export function corruptCopy(src: string, tensor: string, at: number, bytes: number[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'residency-corrupt-'));
  for (const f of readdirSync(src)) copyFileSync(join(src, f), join(dir, f));
  const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
  const shard = join(dir, index.weight_map[tensor]!);
  const file = readFileSync(shard);
  const headerLen = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
  const fd = openSync(shard, 'r+');
  writeSync(fd, Uint8Array.from(bytes), 0, bytes.length, 8 + headerLen + header[tensor]!.data_offsets[0] + at);
  closeSync(fd);
  return dir;
}
