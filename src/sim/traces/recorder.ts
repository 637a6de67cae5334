// Writes the routing the engine saw as a JSONL trace (see jsonl.ts for the format); the engine calls this.
import { openSync, writeSync, closeSync } from 'node:fs';
import { ResidencyError } from '../../errors.ts';
import { TRACE_FORMAT, type TraceHeader } from './jsonl.ts';

export interface TraceGeometry {
  readonly layers: number;
  readonly experts: number;
  readonly topK: number;
}

/** One sequence's tokens in a step, in the order the backend returned their routing. */
export interface RecordedChunk {
  readonly seq: number;
  readonly startPos: number;
  readonly tokens: number;
}

/**
 * Formats steps as trace lines and hands them to `write` (pure; `openTraceFile` gives a file sink).
 * The header goes out on construction.
 */
export class TraceRecorder {
  private readonly g: TraceGeometry;
  private readonly write: (line: string) => void;
  private step = 0;
  constructor(g: TraceGeometry, write: (line: string) => void, source?: string) {
    this.g = g;
    this.write = write;
    const header: TraceHeader = { format: TRACE_FORMAT, version: 1, layers: g.layers, experts: g.experts, top_k: g.topK, ...(source ? { source } : {}) };
    write(JSON.stringify(header) + '\n');
  }

  /**
   * Records one step (steps are numbered from 0 in call order): `routing` is StepOutput.routing, [tokens][layers][topK] in chunk order.
   * Prefill chunks are recorded too (a trace is what the model picked; the replay decides what counts).
   */
  recordStep(chunks: readonly RecordedChunk[], routing: Int32Array): void {
    const { layers, topK } = this.g;
    const total = chunks.reduce((n, c) => n + c.tokens, 0);
    if (routing.length !== total * layers * topK) {
      throw new ResidencyError('INTERNAL', `trace recorder: routing has ${routing.length} ids, expected ${total} tokens x ${layers} x ${topK}`);
    }
    let t = 0;
    let out = '';
    for (const c of chunks) {
      for (let i = 0; i < c.tokens; i++, t++) {
        const ls: number[][] = [];
        for (let l = 0; l < layers; l++) {
          const base = (t * layers + l) * topK;
          ls.push(Array.from(routing.subarray(base, base + topK)));
        }
        out += JSON.stringify({ step: this.step, seq: c.seq, pos: c.startPos + i, layers: ls }) + '\n';
      }
    }
    this.step++;
    if (out) this.write(out);
  }
}

/** A file sink for TraceRecorder (synchronous appends, so a crash loses at most the current step). */
export function openTraceFile(path: string, g: TraceGeometry, source?: string): { recorder: TraceRecorder; close(): void } {
  const fd = openSync(path, 'w');
  const recorder = new TraceRecorder(g, (line) => { writeSync(fd, line); }, source);
  return { recorder, close: () => closeSync(fd) };
}
