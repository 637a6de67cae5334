// Deterministic stand-ins for the engine, tokenizer and residency system, so server tests need no model.
import type { GenerationEngine, GenerationEvent, GenerationRequest, RequestHandle } from '../../src/engine/types.ts';
import { ResidencyError } from '../../src/errors.ts';
import type { RowMap } from '../../src/residency/rowmap.ts';
import { PLAIN_CHAT_TEMPLATE } from '../../src/server/chat-template.ts';
import type { ResidencySnapshot, ResidencyView, ServerModel, ServerTokenizer } from '../../src/server/types.ts';

/** One character per token: id = char code (ASCII 1..127); 0 is EOS. */
export const charTokenizer: ServerTokenizer = {
  encode: (text) => [...text].map((ch) => Math.min(127, ch.codePointAt(0)!)),
  decode: (ids) => ids.map((i) => String.fromCharCode(i)).join(''),
  eosTokenIds: [0],
  vocabSize: 128,
};

/** With the plain chat template (the shipped tiny-moe's); a model without one refuses chat (chat-template tests). */
export const fakeModel: ServerModel = { name: 'fake-moe', maxPositions: 256, tokenizer: charTokenizer, chatTemplate: PLAIN_CHAT_TEMPLATE };

/** The token the fake emits at `index`: cycles through 'a'..'z' from the prompt's sum (greedy) or seed. */
export function fakeToken(req: GenerationRequest, index: number): number {
  const base = req.sampling.temperature === 0 ? req.promptIds.reduce((a, b) => a + b, 0) : (req.sampling.seed ?? 7);
  return 97 + ((base + index) % 26);
}

interface Seq { req: GenerationRequest; onEvent: (e: GenerationEvent) => void; n: number; cancelled: boolean; submitted: number; ttft?: number }

/**
 * A continuous-batching fake: up to `maxBatch` sequences advance one token per step; steps run every
 * `stepMs` (0 = setImmediate). Emits EOS after `eosAfter` tokens when set.
 */
export class FakeEngine implements GenerationEngine {
  private readonly waiting: Seq[] = [];
  private readonly batch: Seq[] = [];
  private timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  private closed = false;
  submitted = 0;
  cancelled = 0;
  /** When true, steps do not run (to fill the queue in tests). */
  paused = false;

  constructor(readonly opts: { maxBatch?: number; stepMs?: number; eosAfter?: number } = {}) {}

  get queueDepth(): number { return this.waiting.length; }
  get running(): number { return this.batch.length; }

  submit(req: GenerationRequest, onEvent: (e: GenerationEvent) => void): RequestHandle {
    const seq: Seq = { req, onEvent, n: 0, cancelled: false, submitted: performance.now() };
    this.submitted++;
    this.waiting.push(seq);
    this.schedule();
    return { cancel: () => { if (!seq.cancelled) { seq.cancelled = true; this.cancelled++; this.schedule(); } } };
  }

  resume(): void { this.paused = false; this.schedule(); }

  private schedule(): void {
    if (this.timer || this.closed || this.paused) return;
    const ms = this.opts.stepMs ?? 0;
    this.timer = ms > 0 ? setTimeout(() => this.step(), ms) : setImmediate(() => this.step());
  }

  private finish(s: Seq, reason: 'stop' | 'length' | 'cancelled'): void {
    s.onEvent({ type: 'done', reason, promptTokens: s.req.promptIds.length, completionTokens: s.n, ...(s.ttft !== undefined ? { timeToFirstToken: s.ttft } : {}) });
  }

  private step(): void {
    this.timer = undefined;
    if (this.paused) return;
    const max = this.opts.maxBatch ?? 8;
    while (this.batch.length < max && this.waiting.length > 0) this.batch.push(this.waiting.shift()!);
    for (const s of [...this.waiting]) if (s.cancelled) { this.waiting.splice(this.waiting.indexOf(s), 1); this.finish(s, 'cancelled'); }
    for (const s of [...this.batch]) {
      let reason: 'stop' | 'length' | 'cancelled' | undefined;
      if (s.cancelled) reason = 'cancelled';
      else {
        const eos = this.opts.eosAfter !== undefined && s.n === this.opts.eosAfter && !s.req.sampling.ignoreEos;
        const tok = eos ? 0 : fakeToken(s.req, s.n);
        if (s.n === 0) s.ttft = (performance.now() - s.submitted) / 1000;
        s.onEvent({ type: 'token', tokenId: tok, index: s.n });
        s.n++;
        if (eos) reason = 'stop';
        else if (s.n >= s.req.sampling.maxTokens) reason = 'length';
      }
      if (reason) { this.batch.splice(this.batch.indexOf(s), 1); this.finish(s, reason); }
    }
    if (this.batch.length > 0 || this.waiting.length > 0) this.schedule();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) { clearTimeout(this.timer as NodeJS.Timeout); clearImmediate(this.timer as NodeJS.Immediate); }
  }
}

/** A residency system with a fixed map whose control accepts {freeze?, counting?} and nothing else. */
export class FakeResidency implements ResidencyView {
  frozen = false;
  counting = true;
  applied = 0;
  readonly map: RowMap;
  constructor(readonly layers = 2, readonly experts = 8, readonly hot = 6) {
    this.map = {
      version: 1, model: 'fake-moe', layers, experts, hot_per_layer: hot,
      layers_map: Array.from({ length: layers }, () => ({ hot: Array.from({ length: hot }, (_, i) => i), cold: Array.from({ length: experts - hot }, (_, i) => hot + i) })),
    };
  }
  snapshot(): ResidencySnapshot {
    return {
      map: this.map,
      geometry: { layers: this.layers, experts: this.experts, hot_per_layer: this.hot },
      cold_share: { overall: 0.1, window: 0.05, per_layer: Array.from({ length: this.layers }, (_, i) => 0.01 * (i + 1)) },
      swaps: { applied: this.applied, refused: 0, superseded: 0, queued: 0, in_flight: 0 },
      controller: { frozen: this.frozen, counting: this.counting },
      expert_use: Array.from({ length: this.layers }, (_, l) => Array.from({ length: this.experts }, (_, e) => (l + 1) * (e + 1))),
      step: 10,
    };
  }
  control(cmd: unknown) {
    if (typeof cmd !== 'object' || cmd === null || Array.isArray(cmd)) throw new ResidencyError('BAD_CONTROL', 'control: expected a JSON object');
    const c = cmd as Record<string, unknown>;
    for (const k of Object.keys(c)) if (k !== 'freeze' && k !== 'counting') throw new ResidencyError('BAD_CONTROL', `control: unknown key '${k}'`);
    for (const k of Object.keys(c)) if (typeof c[k] !== 'boolean') throw new ResidencyError('BAD_CONTROL', `control.${k}: expected a boolean`);
    if (c['freeze'] !== undefined) this.frozen = c['freeze'] as boolean;
    if (c['counting'] !== undefined) this.counting = c['counting'] as boolean;
    return { applied: Object.keys(c) };
  }
}
