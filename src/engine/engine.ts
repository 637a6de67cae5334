// The step loop: schedule -> execute -> update, then the residency hook between steps. Runs
// asynchronously, yielding to the event loop after every step so a server stays responsive.
import { ResidencyError } from '../errors.ts';
import type { Backend } from '../backend/backend.ts';
import type { ResidencyHook, StepReport } from './residency-hook.ts';
import type { FinishReason, GenerationEngine, GenerationEvent, GenerationRequest, RequestHandle } from './types.ts';
import { RequestState } from './request.ts';
import { ModelRunner, type RoutingListener } from './runner.ts';
import { DEFAULT_SCHEDULER, Scheduler, type ScheduledStep, type SchedulerConfig } from './scheduler.ts';
import { validateRequest } from './validate.ts';

/** Without a hook, steps of at most this many tokens are counted (decode-like steps; design.md). */
export const DEFAULT_COUNT_TMAX = 256;

export interface EngineOptions {
  readonly scheduler?: Partial<SchedulerConfig>;
  /** The residency system's seam: which steps count, and what runs between steps. */
  readonly hook?: ResidencyHook;
  /** Called after every step, after the hook (telemetry, benchmarks). */
  readonly onStep?: (report: StepReport) => void;
  /** Receives every step's routing (trace recording); the backend is asked to record it only when set. */
  readonly onRouting?: RoutingListener;
  /** Told when a step fails outside the model (e.g. the hook threw); default: a line on stderr. */
  readonly onError?: (err: Error) => void;
}

const nextTick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class Engine implements GenerationEngine {
  private readonly scheduler: Scheduler;
  private readonly runner: ModelRunner;
  private stepIndex = 0;
  private loop: Promise<void> | null = null;
  private closing = false;

  constructor(
    readonly backend: Backend,
    private readonly options: EngineOptions = {},
  ) {
    this.scheduler = new Scheduler({ ...DEFAULT_SCHEDULER, ...options.scheduler });
    this.runner = new ModelRunner(backend, options.onRouting);
  }

  get queueDepth(): number {
    return this.scheduler.waiting.length;
  }

  get running(): number {
    return this.scheduler.running.length;
  }

  get kvCacheUsage(): number {
    let held = 0;
    for (const r of this.scheduler.running) held += r.capacity;
    return held / (this.scheduler.config.maxRunning * this.backend.spec.maxPositions);
  }

  /** Steps run since the engine started. */
  get steps(): number {
    return this.stepIndex;
  }

  submit(request: GenerationRequest, onEvent: (event: GenerationEvent) => void): RequestHandle {
    if (this.closing) throw new ResidencyError('NOT_AVAILABLE', 'the engine is closing: no new requests');
    validateRequest(request, this.backend.spec);
    const req = new RequestState(request, onEvent, this.backend.spec.eosTokenIds, performance.now());
    this.scheduler.add(req);
    this.start();
    return {
      cancel: () => {
        req.cancelled = true;
      },
    };
  }

  /**
   * Shutting down: new requests are refused from now on, and the waiting ones (never started) end at once
   * with 'cancelled' and `reason`; the running ones go on. Returns how many waiting requests were ended.
   */
  stopAdmitting(reason: string): number {
    this.closing = true;
    const waiting = this.scheduler.waiting.splice(0);
    for (const req of waiting) this.finish(req, 'cancelled', reason);
    return waiting.length;
  }

  /** Ends every running sequence at the next step boundary with 'cancelled' and `reason`; returns how many. */
  cancelRunning(reason: string): number {
    let n = 0;
    for (const req of this.scheduler.running) {
      if (req.cancelled || req.finished) continue;
      req.cancelled = true;
      req.cancelReason = reason;
      n++;
    }
    return n;
  }

  async close(): Promise<void> {
    this.closing = true;
    while (this.loop) await this.loop;
  }

  private start(): void {
    if (this.loop) return;
    this.loop = (async () => {
      try {
        await nextTick(); // never step inside submit(): the caller gets its handle before any event
        while (!this.scheduler.idle) {
          try {
            this.step();
          } catch (err) {
            this.failAll(err as Error);
          }
          await nextTick();
        }
      } finally {
        this.loop = null;
      }
    })();
  }

  /** One engine step. */
  private step(): void {
    let step = this.scheduler.schedule();
    for (const req of step.cancelled) this.finish(req, 'cancelled', req.cancelReason);
    for (const req of step.admitted) {
      try {
        this.runner.admit(req);
      } catch (err) {
        this.finish(req, 'error', (err as Error).message);
      }
    }
    if (step.admitted.some((r) => r.finished)) step = withoutFinished(step);
    if (step.chunks.length === 0) return;
    const counted = this.options.hook ? this.options.hook.countStep(step.tokens) : step.tokens <= DEFAULT_COUNT_TMAX;
    const t0 = process.hrtime.bigint();
    const next = this.execute(step, counted);
    const durationNs = Number(process.hrtime.bigint() - t0);
    if (next) this.update(step, next);
    const report: StepReport = { step: this.stepIndex++, tokens: step.tokens, counted, durationNs };
    this.options.hook?.afterStep(report); // the residency seam: drain, decide, apply swaps between steps
    this.options.onStep?.(report);
  }

  /**
   * Something outside the model step failed (the residency hook, a scheduler invariant): end every request
   * with 'error' rather than leave callers waiting, and keep the engine usable for new requests.
   */
  private failAll(err: Error): void {
    (this.options.onError ?? ((e: Error) => console.error(`engine: ${e.message}`)))(err);
    for (const req of [...this.scheduler.running, ...this.scheduler.waiting.splice(0)]) this.finish(req, 'error', err.message);
  }

  private execute(step: ScheduledStep, counted: boolean): Int32Array | null {
    try {
      return this.runner.execute(step, counted);
    } catch (err) {
      // A failed step ends its sequences (their KV caches are suspect); the rest of the queue carries on.
      const message = (err as Error).message;
      for (const c of step.chunks) this.finish(c.req, 'error', message);
      return null;
    }
  }

  private update(step: ScheduledStep, next: Int32Array): void {
    step.chunks.forEach((c, i) => {
      const req = c.req;
      req.computed += c.count;
      const token = next[i]!;
      if (token < 0) return;
      if (req.stopIds.has(token)) return this.finish(req, 'stop');
      req.tokens.push(token);
      req.firstTokenAt ??= performance.now();
      const lp = req.sampler.last;
      req.emit({ type: 'token', tokenId: token, index: req.generated++, ...(lp ? { logprob: lp.logprob, topLogprobs: lp.top } : {}) });
      if (req.sampler.complete) this.finish(req, 'stop'); // the structured output is whole
      else if (req.generated >= req.request.sampling.maxTokens || req.tokens.length > req.capacity) this.finish(req, 'length');
    });
  }

  private finish(req: RequestState, reason: FinishReason, error?: string): void {
    if (req.finished) return;
    req.finished = reason;
    this.scheduler.finish(req);
    if (req.seq >= 0) this.runner.release(req.seq);
    req.emit({
      type: 'done',
      reason,
      promptTokens: req.promptTokens,
      completionTokens: req.generated,
      ...(req.firstTokenAt !== null ? { timeToFirstToken: (req.firstTokenAt - req.submittedAt) / 1000 } : {}),
      ...(error !== undefined ? { error } : {}),
    });
  }
}

function withoutFinished(step: ScheduledStep): ScheduledStep {
  const chunks = step.chunks.filter((c) => !c.req.finished);
  return { ...step, chunks, tokens: chunks.reduce((n, c) => n + c.count, 0) };
}

export function createEngine(backend: Backend, options?: EngineOptions): Engine {
  return new Engine(backend, options);
}
