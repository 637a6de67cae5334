// /v1/residency: the live map and controller state, control commands (same parser and apply as the
// control file), and /v1/residency/stats, the dashboard's one JSON endpoint.
import type { Hono } from 'hono';
import { remoteDumpNameProblem } from '../residency/folder-files.ts';
import { ApiError } from './api-error.ts';
import { readJsonBody } from './body.ts';
import type { History } from './history.ts';
import type { ServerConfig, ServerDeps, ResidencySnapshot, ResidencyView } from './types.ts';

function need(residency: ResidencyView | undefined): ResidencyView {
  if (!residency) throw new ApiError(503, 'this server runs without a residency system (no map, no controller)', { code: 'residency_unavailable' });
  return residency;
}

/** The dashboard's payload: the snapshot plus a hot mask and the time series. */
export function statsPayload(snap: ResidencySnapshot, history: History, engine: ServerDeps['engine']) {
  const hot = snap.map.layers_map.map((l) => {
    const mask = new Array<boolean>(snap.geometry.experts).fill(false);
    for (const e of l.hot) mask[e] = true;
    return mask;
  });
  return {
    time: Date.now(),
    model: snap.map.model,
    geometry: snap.geometry,
    step: snap.step,
    cold_share: snap.cold_share,
    swaps: snap.swaps,
    controller: snap.controller,
    expert_use: snap.expert_use,
    hot,
    queue_depth: engine.queueDepth,
    running: engine.running,
    kv_cache: kvCacheView(engine),
    history: history.all(),
  };
}

/** The KV pool's use as /v1/residency shows it (null: the backend's KV cache is not paged). */
export function kvCacheView(engine: ServerDeps['engine']) {
  const kv = engine.kvCache;
  if (!kv) return null;
  return {
    blocks: kv.numBlocks, block_size: kv.blockSize, positions: kv.numBlocks * kv.blockSize, dtype: kv.dtype,
    bytes: kv.numBlocks * kv.bytesPerBlock, free_blocks: kv.freeBlocks, cached_free_blocks: kv.cachedFreeBlocks, usage: kv.usage,
    prefix_caching: kv.prefixCaching, prefix_queries: kv.prefixQueries, prefix_hits: kv.prefixHits, preemptions: kv.preemptions,
  };
}

export function residencyRoutes(app: Hono, deps: ServerDeps, history: History, config: ServerConfig): void {
  app.get('/v1/residency', (c) => {
    const s = need(deps.residency).snapshot();
    return c.json({ model: s.map.model, geometry: s.geometry, map: s.map, cold_share: s.cold_share, swaps: s.swaps, controller: s.controller, step: s.step, kv_cache: kvCacheView(deps.engine) });
  });

  app.get('/v1/residency/stats', (c) => c.json(statsPayload(need(deps.residency).snapshot(), history, deps.engine)));

  app.post('/v1/residency/control', async (c) => {
    const residency = need(deps.residency);
    // The command is checked by the residency system's own parser (body-check.ts), so HTTP and the control
    // file accept and reject exactly the same commands; the driver parses it again as it applies it.
    const command = await readJsonBody(c, { name: 'control' }, config.maxBodyBytes);
    checkRemoteDumpPath(command);
    const result = await residency.control(command, { remote: true });
    return c.json({ ok: true, result, controller: residency.snapshot().controller });
  });
}

/**
 * Over HTTP, `dump_counts` may only be a plain file name in the residency folder, none of its own files:
 * the control file is the operator's, but an HTTP client must not be able to write anywhere the server
 * process can, nor over the record. (The driver checks again and opens the file without following links.)
 */
function checkRemoteDumpPath(command: unknown): void {
  if (typeof command !== 'object' || command === null || !('dump_counts' in command)) return;
  const path = (command as { dump_counts: unknown }).dump_counts;
  if (typeof path !== 'string') return; // the residency parser rejects the type, naming the field
  const problem = remoteDumpNameProblem(path);
  if (problem) throw new ApiError(400, `dump_counts: ${problem}`, { param: 'dump_counts', code: 'bad_control' });
}
