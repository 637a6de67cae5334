// The HTTP app: routes, the API key guard, request metrics, and OpenAI-style errors for everything.
import { Hono } from 'hono';
import { accessGuards } from './access.ts';
import { ApiError, errorResponse } from './api-error.ts';
import { handleChat } from './chat.ts';
import { chatFormatter } from './chat-template.ts';
import { handleCompletion } from './completions.ts';
import { dashboardRoutes } from './dashboard.ts';
import { History } from './history.ts';
import { createMetrics } from './metrics.ts';
import type { ServerMetrics } from './metrics.ts';
import type { RelayContext } from './relay.ts';
import { residencyRoutes } from './residency-routes.ts';
import type { ServerDeps } from './types.ts';

export interface ServerApp {
  readonly app: Hono;
  readonly metrics: ServerMetrics;
  readonly history: History;
}

/** Endpoints named in metrics (anything else counts as 'other', so labels stay bounded). */
const endpoints = new Set(['/', '/health', '/metrics', '/v1/models', '/v1/completions', '/v1/chat/completions', '/v1/residency', '/v1/residency/control', '/v1/residency/stats']);

/** `listenHost`: the address listened on (default loopback); it decides the Host and control rules (access.ts). */
export function createApp(deps: ServerDeps, opts: { defaultMetrics?: boolean; listenHost?: string } = {}): ServerApp {
  const { engine, model, config } = deps;
  const metrics = createMetrics(engine, deps.residency, opts);
  const history = new History(metrics, deps.residency);
  const chat = chatFormatter(model.chatTemplate, { bos: model.bosToken, eos: model.eosToken });
  const ctx: RelayContext = { engine, tokenizer: model.tokenizer, metrics, maxQueue: config.maxQueue };
  const app = new Hono();

  app.use('*', async (c, next) => {
    await next();
    const endpoint = endpoints.has(c.req.path) ? c.req.path : 'other';
    metrics.requests.inc({ endpoint, status: String(c.res.status) });
  });

  accessGuards(app, config, opts.listenHost ?? '127.0.0.1');

  app.get('/health', (c) => c.json({ status: 'ok', model: model.name, queue_depth: engine.queueDepth, running: engine.running }));
  app.get('/v1/models', (c) =>
    c.json({ object: 'list', data: [{ id: model.name, object: 'model', created: 0, owned_by: 'moe-residency', max_model_len: model.maxPositions, chat_template: chat.kind }] }));
  app.post('/v1/completions', (c) => handleCompletion(c, ctx, model, config));
  app.post('/v1/chat/completions', (c) => handleChat(c, ctx, model, chat, config));
  residencyRoutes(app, deps, history, config);
  app.get('/metrics', async (c) => c.body(await metrics.registry.metrics(), 200, { 'content-type': metrics.registry.contentType }));
  dashboardRoutes(app);

  app.notFound(() => { throw new ApiError(404, 'no such endpoint: see /v1/models, /v1/completions, /v1/chat/completions, /v1/residency, /metrics', { code: 'not_found' }); });
  app.onError((err, c) => errorResponse(c, err));
  return { app, metrics, history };
}
