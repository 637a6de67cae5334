// Turns a scheduled step into a backend StepInput, runs it, and samples the next token of each sequence
// whose chunk reached its last known token.
import type { Backend, SequenceChunk } from '../backend/backend.ts';
import type { RequestState } from './request.ts';
import type { ScheduledStep } from './scheduler.ts';
import { SamplerScratch } from './sampler.ts';

export class ModelRunner {
  private readonly scratch: SamplerScratch;
  private nextSeq = 0;

  constructor(readonly backend: Backend) {
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
    const chunks: SequenceChunk[] = step.chunks.map((c) => ({
      seq: c.req.seq,
      tokens: c.req.tokens.slice(c.startPos, c.startPos + c.count),
      startPos: c.startPos,
    }));
    const { logits } = this.backend.forward({ chunks, count });
    const V = this.backend.spec.vocabSize;
    const next = new Int32Array(step.chunks.length).fill(-1);
    step.chunks.forEach((c, i) => {
      if (c.samples) next[i] = c.req.sampler.sample(logits, i * V, this.scratch);
    });
    return next;
  }

  release(seq: number): void {
    if (seq >= 0) this.backend.closeSequence(seq);
  }
}
