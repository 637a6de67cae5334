// Turns a scheduled step into a backend StepInput, runs it, and samples the next token of each sequence
// whose chunk reached its last known token.
import { FED_TOKEN, type Backend, type PendingStep, type SequenceChunk, type StepOutput } from '../backend/backend.ts';

/** Receives each step's routing: the step's chunks and [tokens][layers][topK] expert ids in chunk order. */
export type RoutingListener = (chunks: readonly SequenceChunk[], routing: Int32Array) => void;
import type { ScheduledStep } from './scheduler.ts';
import type { KvSpace } from './kv-space.ts';
import { nonFiniteLogits, SamplerScratch } from './sampler.ts';

export class ModelRunner {
  private readonly scratch: SamplerScratch;
  /** The logits of every step go here (grown to the widest step): no step allocates its logits. */
  private logits = new Float32Array(0);

  constructor(
    readonly backend: Backend,
    private readonly kv: KvSpace,
    private readonly onRouting?: RoutingListener,
  ) {
    this.scratch = new SamplerScratch(backend.spec.vocabSize);
  }

  /** Runs the step; returns per chunk the sampled token, or -1 for a prefill chunk that samples nothing. */
  execute(step: ScheduledStep, count: boolean): Int32Array {
    const chunks = this.chunksOf(step, false);
    // Every sampling chunk greedy with nothing reading its logits: the backend's argmax (on the device for CUDA).
    const argmaxOnly = step.chunks.every((c) => !c.samples || c.req.sampler.plainGreedy);
    const out = this.backend.forward({ chunks, count, recordRouting: this.onRouting !== undefined, logitsInto: this.logitsFor(chunks.length), argmaxOnly });
    if (this.onRouting && out.routing) this.onRouting(chunks, out.routing);
    return this.tokensOf(step, out);
  }

  /**
   * Starts a greedy decode step on a backend that runs ahead (Backend.submit) and returns before it completes;
   * `fed`: each chunk's token is the argmax of its sequence's step just before, still on the device
   * (FED_TOKEN). finish() gives what execute() would have.
   */
  submit(step: ScheduledStep, count: boolean, fed: boolean): PendingStep {
    const chunks = this.chunksOf(step, fed);
    return this.backend.submit!({ chunks, count, argmaxOnly: true });
  }

  /** The tokens of a submitted step, once it has completed. */
  finish(step: ScheduledStep, pending: PendingStep): Int32Array {
    return this.tokensOf(step, pending.wait());
  }

  private chunksOf(step: ScheduledStep, fed: boolean): SequenceChunk[] {
    return step.chunks.map((c) => {
      // A copy: a step submitted to run ahead may be read after the sequence's table changed (grew, or was given back).
      const table = this.kv.table(c.req);
      const blockTable = table ? [...table] : undefined;
      return {
        seq: c.req.seq,
        tokens: fed ? [FED_TOKEN] : c.req.tokens.slice(c.startPos, c.startPos + c.count),
        startPos: c.startPos,
        ...(blockTable ? { blockTable } : {}),
      };
    });
  }

  private logitsFor(chunks: number): Float32Array {
    const V = this.backend.spec.vocabSize;
    if (this.logits.length < chunks * V) this.logits = new Float32Array(chunks * V);
    return this.logits;
  }

  private tokensOf(step: ScheduledStep, out: StepOutput): Int32Array {
    const V = this.backend.spec.vocabSize;
    const next = new Int32Array(step.chunks.length).fill(-1);
    step.chunks.forEach((c, i) => {
      if (!c.samples) return;
      // (A backend that does not take argmaxOnly returns logits: sampled from them as usual.)
      if (out.argmax && out.nonFinite?.[i]) throw nonFiniteLogits();
      next[i] = out.argmax?.[i] ?? c.req.sampler.sample(out.logits, i * V, this.scratch);
    });
    return next;
  }
}
