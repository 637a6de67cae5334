// What the server needs from the model and the residency system: small seams, so tests can use fakes.
import type { GenerationEngine } from '../engine/types.ts';
import type { RowMap } from '../residency/rowmap.ts';

/** The tokenizer as the server uses it (the model loader's tokenizer fits this shape). */
export interface ServerTokenizer {
  encode(text: string): number[];
  /** The same ids as `encode`, computed off the main thread (long prompts use it when present). */
  encodeAsync?(text: string): Promise<number[]>;
  decode(ids: readonly number[]): string;
  /** A special token (control text such as <|im_start|>): never part of structured output. */
  isSpecial?(id: number): boolean;
  readonly eosTokenIds: readonly number[];
  readonly vocabSize: number;
}

/** The served model: its name, its context length, its tokenizer and (optional) chat template. */
export interface ServerModel {
  /** Name in /v1/models and the `model` field of requests and responses. */
  readonly name: string;
  /** Context length: prompt tokens + max_tokens must fit in it. */
  readonly maxPositions: number;
  readonly tokenizer: ServerTokenizer;
  /** The chat template: the checkpoint's own (chat_template.jinja or tokenizer_config.json), or --chat-template's file. */
  readonly chatTemplate?: string;
  /** Where chatTemplate came from (default 'checkpoint'). */
  readonly chatTemplateSource?: 'checkpoint' | '--chat-template';
  readonly bosToken?: string;
  readonly eosToken?: string;
}

/** Map geometry: fixed for the life of a process (design.md section 4). */
export interface ResidencyGeometry {
  readonly layers: number;
  readonly experts: number;
  readonly hot_per_layer: number;
}

/** A plain, serializable picture of the residency system at one moment. */
export interface ResidencySnapshot {
  readonly map: RowMap;
  readonly geometry: ResidencyGeometry;
  /** Cold share: picks served from the cold bank / all counted picks. */
  readonly cold_share: {
    /** Since the process started (null before any counted pick). */
    readonly overall: number | null;
    /** Over the latest telemetry window (null when none yet). */
    readonly window: number | null;
    /** Per layer over the latest window (empty when none yet). */
    readonly per_layer: readonly (number | null)[];
  };
  /**
   * applied: landed in the banks; in_flight: requested, bytes still moving (banks that move in the background);
   * superseded: decided again at a later drain because the banks had no room to start them.
   */
  readonly swaps: { readonly applied: number; readonly refused: number; readonly superseded: number; readonly queued: number; readonly in_flight: number };
  /**
   * What the residency folder could not take this run (a full disk): lines dropped from telemetry.jsonl and
   * swaps.jsonl, writes of map.json that failed. Absent without a residency folder.
   */
  readonly records?: { readonly telemetry_lines_dropped: number; readonly swap_lines_dropped: number; readonly map_writes_failed: number };
  /** Controller state: freeze/counting flags, budgets, step counters (whatever the controller reports). */
  readonly controller: Readonly<Record<string, unknown>>;
  /** Recent expert use per layer ([layer][expert], e.g. decayed counts), for the heatmap. */
  readonly expert_use: readonly (readonly number[])[];
  /** Decode steps counted so far (for swap-event and throughput plots). */
  readonly step: number;
}

/** What a control command did (the residency system's own report, passed through). */
export type ControlResult = Readonly<Record<string, unknown>>;

/**
 * The server's view of the residency system. `control` must parse and apply a command exactly as the
 * control file does, and change nothing when it rejects one (throwing ResidencyError('BAD_CONTROL')).
 */
export interface ResidencyView {
  snapshot(): ResidencySnapshot;
  /** `remote`: the command came over HTTP (dump_counts then only a plain name in the residency folder). */
  control(command: unknown, opts?: { readonly remote?: boolean }): ControlResult | Promise<ControlResult>;
}

export interface ServerConfig {
  readonly apiKey?: string;
  /** Required (as a Bearer token) by POST /v1/residency/control instead of apiKey; without it, control over HTTP needs a loopback listener. */
  readonly controlApiKey?: string;
  /** Web page origins (scheme://host[:port], or '*') allowed besides this server itself and loopback pages (Origin and CORS). */
  readonly allowedOrigins: readonly string[];
  /**
   * Host names a loopback listener answers besides loopback names (a proxy in front), or '*' for any; the
   * DNS-rebinding guard, independent of allowedOrigins. Default none.
   */
  readonly allowedHosts?: readonly string[];
  /** Requests waiting to join the batch before new ones get 429. */
  readonly maxQueue: number;
  /**
   * Prompts longer than this many characters are refused (400) before tokenizing; default
   * PROMPT_CHARS_PER_TOKEN x the model's context (real text averages 3-5 characters per token).
   */
  readonly maxPromptChars?: number;
  /** Request bodies above this many bytes get 413. */
  readonly maxBodyBytes: number;
  /** Seconds between samples of the dashboard's history (cold share, swaps, throughput). */
  readonly sampleSeconds: number;
  /** A client must send its request headers within this, and its whole request (body too) within requestTimeoutMs; responses are not timed. */
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  /**
   * Open connections at most, in all and from one client address; past either, the connection idle longest is
   * closed to make room (connections.ts), or the newcomer when every one has a request in progress.
   */
  readonly maxConnections: number;
  readonly maxConnectionsPerClient: number;
}

export const defaultServerConfig: ServerConfig = Object.freeze({
  maxQueue: 64,
  allowedOrigins: Object.freeze([]) as readonly string[],
  maxBodyBytes: 1 << 20,
  sampleSeconds: 1,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  maxConnections: 1024,
  maxConnectionsPerClient: 256,
});

export interface ServerDeps {
  readonly engine: GenerationEngine;
  readonly model: ServerModel;
  /** Absent when serving without a residency system (then /v1/residency answers 503). */
  readonly residency?: ResidencyView;
  readonly config: ServerConfig;
  /** Where warnings go (ignored request fields); default: nowhere. */
  readonly log?: (line: string) => void;
  /** One line per request (method, path, status, time to the response's head); default: off. */
  readonly accessLog?: (line: string) => void;
  /** The CUDA backend's host expert lane, when it runs (--host-experts): its counts and split go to /metrics. */
  readonly hostLane?: HostLaneView;
}

/** What /metrics reads of the host expert lane (src/backend/cuda/host-lane/host-lane/lane.ts HostExpertLane.stats()). */
export interface HostLaneView {
  stats(): {
    readonly requests: number;
    readonly busyMs: number;
    readonly split: {
      /** take[c] in parts of an expert (parts an expert). */
      readonly parts: number;
      readonly take: readonly number[];
      readonly layerUs: readonly (number | null)[];
      readonly hostLayers: number;
      readonly meanWaitUs: number;
      readonly splitLayers: number;
      readonly meanUnitsWaitUs: number;
    };
  };
}
