// Prometheus metrics (prom-client, one registry per server so tests can run several side by side).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import type { GenerationEngine } from '../engine/types.ts';
import type { HostLaneView, ResidencyView } from './types.ts';

const latencyBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** End-to-end request latency: whole generations, up to minutes. */
const requestBuckets = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];

export interface ServerMetrics {
  readonly registry: Registry;
  readonly requests: Counter<'endpoint' | 'status'>;
  /** Generations (one per choice) by how they ended: stop, length, abort (client gone), error. */
  readonly requestsByFinish: Counter<'finished_reason'>;
  /** Submit to the last token of one generation. */
  readonly requestLatency: Histogram;
  readonly promptTokens: Counter;
  readonly completionTokens: Counter;
  readonly timeToFirstToken: Histogram;
  readonly interTokenLatency: Histogram;
  /** One generated token relayed (counter + the dashboard's throughput). */
  countToken(): void;
  /** Completion tokens relayed since start. */
  tokensGenerated(): number;
}

/**
 * prom-client's default metrics, less the gauges whose names end in `_total` (promtool: "non-counter
 * metrics should not have _total suffix"): nodejs_active_{handles,requests,resources}_total, whose values
 * the per-type gauges (nodejs_active_handles{type} ...) already carry.
 */
function processMetrics(registry: Registry): void {
  const scratch = new Registry();
  collectDefaultMetrics({ register: scratch, prefix: 'residency_process_' });
  for (const m of scratch.getMetricsAsArray() as unknown as Metric[]) {
    const name = (m as unknown as { name: string }).name;
    if (!(m instanceof Counter) && name.endsWith('_total')) continue;
    registry.registerMetric(m);
  }
}

export function createMetrics(engine: GenerationEngine, residency: ResidencyView | undefined, opts: { defaultMetrics?: boolean; modelName?: string; hostLane?: HostLaneView } = {}): ServerMetrics {
  const registry = new Registry();
  // vLLM's dashboards select by model_name; every series here carries it.
  if (opts.modelName !== undefined) registry.setDefaultLabels({ model_name: opts.modelName });
  if (opts.defaultMetrics ?? true) processMetrics(registry);
  const requests = new Counter({ name: 'residency_requests_total', help: 'HTTP requests by endpoint and status code', labelNames: ['endpoint', 'status'] as const, registers: [registry] });
  const promptTokens = new Counter({ name: 'residency_prompt_tokens_total', help: 'Prompt tokens of finished requests', registers: [registry] });
  const completionTokens = new Counter({ name: 'residency_completion_tokens_total', help: 'Generated tokens relayed to clients', registers: [registry] });
  const timeToFirstToken = new Histogram({ name: 'residency_time_to_first_token_seconds', help: 'Submit to first generated token', buckets: latencyBuckets, registers: [registry] });
  const interTokenLatency = new Histogram({ name: 'residency_inter_token_latency_seconds', help: 'Time between consecutive tokens of one request', buckets: latencyBuckets, registers: [registry] });

  const requestsByFinish = new Counter({ name: 'residency_request_finished_total', help: 'Generations (one per choice) by finish reason: stop, length, abort, error', labelNames: ['finished_reason'] as const, registers: [registry] });
  const requestLatency = new Histogram({ name: 'residency_e2e_request_latency_seconds', help: 'Submit to the end of one generation', buckets: requestBuckets, registers: [registry] });
  new Gauge({
    name: 'residency_kv_cache_usage_ratio', help: 'KV cache held (0..1): a paged pool\'s blocks in use, else positions reserved by running sequences / what the running batch may hold', registers: [registry],
    collect() { this.set(engine.kvCacheUsage ?? 0); },
  });
  new Gauge({ name: 'residency_queue_depth', help: 'Requests waiting to join the batch', registers: [registry], collect() { this.set(engine.queueDepth); } });
  new Gauge({ name: 'residency_running_sequences', help: 'Sequences in the running batch', registers: [registry], collect() { this.set(engine.running); } });
  vllmMetrics(registry, engine);

  if (residency) {
    // Read the residency system once per scrape; the collectors below share the snapshot.
    let snap: ReturnType<ResidencyView['snapshot']> | undefined;
    const read = () => (snap = residency.snapshot());
    new Gauge({
      name: 'residency_cold_share', help: 'Cold share (cold picks / counted picks), overall since start and over the latest window', labelNames: ['scope'] as const, registers: [registry],
      collect() {
        const s = read();
        if (s.cold_share.overall !== null) this.set({ scope: 'overall' }, s.cold_share.overall);
        if (s.cold_share.window !== null) this.set({ scope: 'window' }, s.cold_share.window);
      },
    });
    new Gauge({
      name: 'residency_cold_share_layer', help: 'Cold share per MoE layer over the latest window', labelNames: ['layer'] as const, registers: [registry],
      collect() {
        (snap ?? read()).cold_share.per_layer.forEach((v, i) => { if (v !== null) this.set({ layer: String(i) }, v); });
      },
    });
    mirrorCounter(registry, 'residency_swaps_applied_total', 'Swaps landed in the banks (applied between steps)', () => (snap ?? read()).swaps.applied);
    mirrorCounter(registry, 'residency_swaps_refused_total', 'Swaps refused as stale', () => (snap ?? read()).swaps.refused);
    mirrorCounter(registry, 'residency_swaps_superseded_total', 'Swaps decided again at a later drain because the banks had no room to start them', () => (snap ?? read()).swaps.superseded);
    new Gauge({ name: 'residency_swaps_queued', help: 'Swaps planned and waiting to be applied', registers: [registry], collect() { this.set((snap ?? read()).swaps.queued); } });
    new Gauge({ name: 'residency_swaps_in_flight', help: 'Swaps requested from the banks whose row copies have not landed yet', registers: [registry], collect() { this.set((snap ?? read()).swaps.in_flight); } });
    const records = () => (snap ?? read()).records;
    let linesSeen = { 'telemetry.jsonl': 0, 'swaps.jsonl': 0 };
    new Counter({
      name: 'residency_telemetry_lines_dropped_total', help: 'Lines the residency folder could not take (a full disk), by file', labelNames: ['file'] as const, registers: [registry],
      collect() {
        const r = records();
        if (!r) return;
        const now = { 'telemetry.jsonl': r.telemetry_lines_dropped, 'swaps.jsonl': r.swap_lines_dropped };
        for (const file of ['telemetry.jsonl', 'swaps.jsonl'] as const) this.inc({ file }, Math.max(0, now[file] - linesSeen[file]));
        linesSeen = now;
      },
    });
    mirrorCounter(registry, 'residency_map_writes_failed_total', 'Writes of the residency folder\'s map.json that failed (the last one written stays)', () => records()?.map_writes_failed ?? 0);
  }

  if (opts.hostLane) hostLaneMetrics(registry, opts.hostLane);

  let generated = 0;
  return {
    registry, requests, requestsByFinish, requestLatency, promptTokens, completionTokens, timeToFirstToken, interTokenLatency,
    countToken: () => { generated++; completionTokens.inc(); },
    tokensGenerated: () => generated,
  };
}

/**
 * The series vLLM exports under the same meaning, by its names (what routers and autoscalers read: the Gateway API
 * inference extension's endpoint picker, vLLM's dashboards). prom-client takes ':' in a metric name, as Prometheus does.
 */
function vllmMetrics(registry: Registry, engine: GenerationEngine): void {
  new Gauge({ name: 'vllm:num_requests_running', help: 'Number of requests in model execution batches', registers: [registry], collect() { this.set(engine.running); } });
  new Gauge({ name: 'vllm:num_requests_waiting', help: 'Number of requests waiting to be processed', registers: [registry], collect() { this.set(engine.queueDepth); } });
  new Gauge({ name: 'vllm:kv_cache_usage_perc', help: 'KV-cache usage. 1 means 100 percent usage', registers: [registry], collect() { this.set(engine.kvCacheUsage ?? 0); } });
  mirrorCounter(registry, 'vllm:prefix_cache_queries_total', 'Prefix cache queries, in terms of number of queried tokens', () => engine.kvCache?.prefixQueries ?? 0);
  mirrorCounter(registry, 'vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens', () => engine.kvCache?.prefixHits ?? 0);
  mirrorCounter(registry, 'vllm:num_preemptions_total', 'Cumulative number of preemptions from the engine', () => engine.preemptions ?? 0);
}

/** A counter mirroring a monotonic total kept elsewhere (the controller's, the lane's): it advances by the difference. */
function mirrorCounter(registry: Registry, name: string, help: string, total: () => number): void {
  let last = 0;
  new Counter({
    name, help, registers: [registry],
    collect() {
      const v = total();
      if (v > last) { this.inc(v - last); last = v; }
    },
  });
}

/** Counts of the host expert lane shown on the first cold experts' split (a step at top-8 has up to 8 a row). */
const LANE_TAKE_SHOWN = 16;

/** The host expert lane (--host-experts): its requests, busy time, the split and the layers' times at it. */
function hostLaneMetrics(registry: Registry, lane: HostLaneView): void {
  let snap: ReturnType<HostLaneView['stats']> | undefined;
  const read = () => (snap = lane.stats());
  // The first collector reads the lane afresh each scrape; the others share what it read.
  mirrorCounter(registry, 'residency_host_lane_requests_total', 'Requests the host expert lane answered (a layer\'s cold experts handed to the host at a decode step)', () => read().requests);
  mirrorCounter(registry, 'residency_host_lane_busy_seconds_total', 'Time the host expert lane\'s threads spent answering', () => (snap ?? read()).busyMs / 1e3);
  new Gauge({
    name: 'residency_host_lane_take', help: 'Of a layer\'s cold experts at a decode step (cold_experts), how many the host computes (a fraction: one expert split with the GPU)', labelNames: ['cold_experts'] as const, registers: [registry],
    collect() {
      const { take, parts } = (snap ?? read()).split;
      take.slice(1, LANE_TAKE_SHOWN + 1).forEach((v, i) => this.set({ cold_experts: String(i + 1) }, v / parts));
    },
  });
  new Gauge({
    name: 'residency_host_lane_layer_seconds', help: 'A layer\'s cold experts on both sides at the split (routing to answer; recent layers), by its cold experts', labelNames: ['cold_experts'] as const, registers: [registry],
    collect() {
      this.reset(); // a count no longer measured at its split drops out
      (snap ?? read()).split.layerUs.slice(1, LANE_TAKE_SHOWN + 1).forEach((v, i) => { if (v !== null) this.set({ cold_experts: String(i + 1) }, v / 1e6); });
    },
  });
  new Gauge({
    name: 'residency_host_lane_gpu_wait_seconds', help: 'The GPU\'s mean wait for the host\'s answer per layer posted to it, since start (counted every 64 steps)',
    registers: [registry], collect() { this.set((snap ?? read()).split.meanWaitUs / 1e6); },
  });
  new Gauge({
    name: 'residency_host_lane_units_wait_seconds', help: 'The GPU\'s mean wait for the host\'s units of the expert split between them, per split layer, since start (counted every 64 steps)',
    registers: [registry], collect() { this.set((snap ?? read()).split.meanUnitsWaitUs / 1e6); },
  });
}
