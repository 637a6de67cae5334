// Turns a scheduled step into a backend StepInput, runs it, and samples the next token of each sequence
// whose chunk reached its last known token.
import { FED_TOKEN, type Backend, type PendingStep, type SequenceChunk, type StepOutput } from '../backend/backend.ts';

/** Receives each step's routing: the step's chunks and [tokens][layers][topK] expert ids in chunk order. */
export type RoutingListener = (chunks: readonly SequenceChunk[], routing: Int32Array) => void;
import type { RequestState } from './request.ts';
import type { ScheduledStep } from './scheduler.ts';
import { nonFiniteLogits, SamplerScratch } from './sampler.ts';

export class ModelRunner {
  private readonly scratch: SamplerScratch;
  private nextSeq = 0;
  /** The logits of every step go here (grown to the widest step): no step allocates its logits. */
  private logits = new Float32Array(0);

  constructor(
    readonly backend: Backend,
    private readonly onRouting?: RoutingListener,
  ) {
    this.scratch = new SamplerScratch(backend.spec.vocabSize);
  }

  /** Gives a newly admitted request a backend sequence (a KV cache of prompt + maxTokens positions). */
  admit(req: RequestState): void {
    const capacity = Math.min(req.promptTokens + req.request.sampling.maxTokens, this.backend.spec.maxPositions);
    const seq = this.nextSeq++;
    this.backend.openSequence(seq, capacity);
    req.seq = seq;
    req.capacity = capacity;
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
    return step.chunks.map((c) => ({
      seq: c.req.seq,
      tokens: fed ? [FED_TOKEN] : c.req.tokens.slice(c.startPos, c.startPos + c.count),
      startPos: c.startPos,
    }));
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

  release(seq: number): void {
    if (seq >= 0) this.backend.closeSequence(seq);
  }
}
