// The step loop: schedule -> execute -> update, then the residency hook between steps. Runs
// asynchronously, yielding to the event loop after every step so a server stays responsive.
import { ResidencyError } from '../errors.ts';
import type { Backend, PendingStep } from '../backend/backend.ts';
import type { ResidencyHook, StepReport } from './residency-hook.ts';
import type { FinishReason, GenerationEngine, GenerationEvent, GenerationRequest, RequestHandle } from './types.ts';
import { RequestState } from './request.ts';
import { ModelRunner, type RoutingListener } from './runner.ts';
import { DEFAULT_SCHEDULER, MAX_DEFAULT_RUNNING, Scheduler, type ScheduledStep, type SchedulerConfig } from './scheduler.ts';
import { kvSpaceFor, type KvSpace } from './kv-space.ts';
import type { KvCacheStats } from './types.ts';
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
  /**
   * Greedy decode runs ahead on a backend that can (Backend.submit; default on): while a decode step runs, the
   * next one is submitted with each sequence's token fed from that step's argmax on the device, so the host's
   * work between steps (sampling, events, the residency hook) overlaps the device's. The same tokens; a request
   * that ends costs one step computed and dropped.
   */
  readonly runAhead?: boolean;
  /**
   * Prefix caching on a paged backend (default on, as vLLM's v1 engine): full blocks of a prompt another request
   * computed are reused, and only the new tokens are prefilled. Ignored for a backend without a KV pool.
   */
  readonly prefixCaching?: boolean;
}

/** A step submitted and not yet finished (run-ahead decoding). */
interface InFlight {
  readonly step: ScheduledStep;
  readonly counted: boolean;
  readonly pending: PendingStep;
  readonly t0: bigint;
}

const nextTick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class Engine implements GenerationEngine {
  private readonly scheduler: Scheduler;
  private readonly runner: ModelRunner;
  private readonly kv: KvSpace;
  private stepIndex = 0;
  private loop: Promise<void> | null = null;
  private closing = false;
  /** The step running ahead, finished by the next step() (after the event loop has had its turn). */
  private inFlight: InFlight | null = null;
  /** When the last step finished: a step's duration runs from its submission or this, whichever is later. */
  private lastDone = 0n;

  constructor(
    readonly backend: Backend,
    private readonly options: EngineOptions = {},
  ) {
    this.kv = kvSpaceFor(backend, options.prefixCaching ?? true);
    // A paged pool: as many sequences as it has blocks (each holds one at least), up to vLLM's default.
    const maxRunning = options.scheduler?.maxRunning
      ?? (backend.kvCache ? Math.min(MAX_DEFAULT_RUNNING, backend.kvCache.numBlocks) : DEFAULT_SCHEDULER.maxRunning);
    this.scheduler = new Scheduler({ ...DEFAULT_SCHEDULER, ...options.scheduler, maxRunning }, this.kv);
    this.runner = new ModelRunner(backend, this.kv, options.onRouting);
  }

  /** The scheduler's limits as resolved (maxRunning from the pool when not given). */
  get config(): SchedulerConfig {
    return this.scheduler.config;
  }

  get queueDepth(): number {
    return this.scheduler.waiting.length;
  }

  get running(): number {
    return this.scheduler.running.length;
  }

  get kvCacheUsage(): number {
    return this.scheduler.usage;
  }

  /** The paged KV cache's figures. */
  get kvCache(): KvCacheStats | null {
    const s = this.kv.stats();
    if (!s) return null;
    return { ...s, usage: this.kv.usage(this.scheduler.running, this.scheduler.config.maxRunning), prefixCaching: this.options.prefixCaching ?? true, preemptions: this.scheduler.preemptions };
  }

  /** Requests preempted since start (their KV cache given back, recomputed later). */
  get preemptions(): number {
    return this.scheduler.preemptions;
  }

  /** Steps run since the engine started. */
  get steps(): number {
    return this.stepIndex;
  }

  submit(request: GenerationRequest, onEvent: (event: GenerationEvent) => void): RequestHandle {
    if (this.closing) throw new ResidencyError('NOT_AVAILABLE', 'the engine is closing: no new requests');
    validateRequest(request, this.backend.spec);
    if (request.promptIds.length >= this.kv.maxPositions) {
      throw new ResidencyError('BAD_REQUEST', `promptIds: ${request.promptIds.length} tokens leave no room to generate: the KV cache holds ${this.kv.maxPositions} positions`);
    }
    const req = new RequestState(request, onEvent, this.backend.spec.eosTokenIds, performance.now());
    req.capacity = Math.min(req.promptTokens + request.sampling.maxTokens, this.backend.spec.maxPositions, this.kv.maxPositions);
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
        while (!this.scheduler.idle || this.inFlight) {
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
    if (this.inFlight) return this.finishInFlight();
    const step = this.scheduler.schedule();
    for (const req of step.cancelled) this.finish(req, 'cancelled', req.cancelReason);
    for (const { req, error } of step.failed) this.finish(req, 'error', error.message);
    if (step.chunks.length === 0) return;
    const copies = this.kv.takeCopies();
    if (copies.length > 0) {
      try {
        this.backend.copyBlocks!(copies);
      } catch (err) {
        // A copy that did not land leaves the blocks it was for suspect: end their requests, as a failed step does.
        for (const c of step.chunks) this.finish(c.req, 'error', (err as Error).message);
        return;
      }
    }
    const counted = this.counts(step);
    const t0 = process.hrtime.bigint();
    if (this.runsAhead(step)) {
      const pending = this.submitStep(step, counted);
      if (pending) this.inFlight = { step, counted, pending, t0 };
      return;
    }
    const next = this.execute(step, counted);
    if (next) this.update(step, next);
    this.report(step, counted, t0);
  }

  private counts(step: ScheduledStep): boolean {
    return this.options.hook ? this.options.hook.countStep(step.countTokens) : step.countTokens <= DEFAULT_COUNT_TMAX;
  }

  private report(step: ScheduledStep, counted: boolean, t0: bigint): void {
    const now = process.hrtime.bigint();
    const durationNs = Number(now - (t0 > this.lastDone ? t0 : this.lastDone));
    this.lastDone = now;
    const report: StepReport = { step: this.stepIndex++, tokens: step.tokens, counted, durationNs };
    this.options.hook?.afterStep(report); // the residency seam: drain, decide, apply swaps between steps
    this.options.onStep?.(report);
  }

  /** A step that may run ahead: greedy decode (one token a chunk, every chunk sampling, argmax only) on a backend that submits. */
  private runsAhead(step: ScheduledStep): boolean {
    if (this.options.runAhead === false || !this.backend.submit || this.options.onRouting) return false;
    return step.chunks.every((c) => c.count === 1 && c.samples && c.req.sampler.plainGreedy);
  }

  /**
   * Finishes the step in flight. First, when every running request goes on decoding greedily, the step after it
   * is submitted (its tokens fed on the device), so it runs while this one's tokens are handled.
   */
  private finishInFlight(): void {
    const cur = this.inFlight!;
    this.inFlight = null;
    const ahead = this.continuation(cur.step);
    let next: InFlight | null = null;
    if (ahead) {
      const counted = this.counts(ahead);
      const t0 = process.hrtime.bigint();
      try {
        next = { step: ahead, counted, pending: this.runner.submit(ahead, counted, true), t0 };
      } catch {
        // Not run ahead after all: the step after this one is planned by the scheduler, as any other.
      }
    }
    let tokens: Int32Array | null = null;
    try {
      tokens = this.runner.finish(cur.step, cur.pending);
    } catch (err) {
      for (const c of cur.step.chunks) this.finish(c.req, 'error', (err as Error).message);
    }
    if (tokens) this.update(cur.step, tokens);
    this.report(cur.step, cur.counted, cur.t0);
    if (next && next.step.chunks.every((c) => c.req.finished)) {
      // Every request it ran ahead for has ended: drop it now, before anyone told of their ends (their done
      // events' continuations run after this step) can let the backend go while it still runs.
      try {
        next.pending.wait();
      } catch {
        // its requests have ended already
      }
      this.report(next.step, next.counted, next.t0);
      next = null;
    }
    this.inFlight = next;
  }

  /**
   * The next decode step of the requests of `step` (a step running ahead: each chunk decodes one token greedily),
   * when it can be planned before `step`'s tokens are known: nobody waiting to join (they join through the
   * scheduler), every running request in it, none ended or cancelled, each with room in its KV cache for the
   * token after (taken now, without preempting anyone: when there is none, the scheduler plans the step). Else null.
   */
  private continuation(step: ScheduledStep): ScheduledStep | null {
    if (this.scheduler.waiting.length > 0 || this.scheduler.running.length !== step.chunks.length) return null;
    for (const c of step.chunks) {
      const r = c.req;
      if (r.finished || r.cancelled || c.startPos + 2 > r.capacity) return null;
    }
    if (!step.chunks.every((c) => this.kv.grow(c.req, c.startPos + 2))) return null;
    const chunks = step.chunks.map((c) => ({ req: c.req, count: 1, startPos: c.startPos + 1, samples: true }));
    return { chunks, admitted: [], cancelled: [], failed: [], tokens: chunks.length, countTokens: chunks.length };
  }

  /** Submits a step to run ahead (its tokens given); a backend refusing it ends its requests, as a failed step does. */
  private submitStep(step: ScheduledStep, counted: boolean): PendingStep | null {
    try {
      return this.runner.submit(step, counted, false);
    } catch (err) {
      for (const c of step.chunks) this.finish(c.req, 'error', (err as Error).message);
      return null;
    }
  }

  /**
   * Something outside the model step failed (the residency hook, a scheduler invariant): end every request
   * with 'error' rather than leave callers waiting, and keep the engine usable for new requests.
   */
  private failAll(err: Error): void {
    (this.options.onError ?? ((e: Error) => console.error(`engine: ${e.message}`)))(err);
    this.inFlight = null; // its requests end here; a later step's wait covers its device work
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
      // Ended, or cancelled, while a step ran ahead of it: that step's token is dropped (a cancelled request ends at the next schedule).
      if (req.finished || req.cancelled) return;
      req.computed += c.count;
      this.scheduler.committed(req);
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
    this.scheduler.finish(req); // and gives back its KV cache
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

export function createEngine(backend: Backend, options?: EngineOptions): Engine {
  return new Engine(backend, options);
}
