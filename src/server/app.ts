// The HTTP app: routes, the access guards and CORS, request metrics and the access log, and OpenAI-style
// errors for everything.
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { accessGuards, isLoopbackHost, isLoopbackOrigin, normalizeOrigin } from './access.ts';
import { ApiError, errorResponse } from './api-error.ts';
import { IGNORED_FIELDS_HEADER } from './body.ts';
import { handleChat } from './chat.ts';
import { chatFormatter } from './chat-template.ts';
import { checkModel, handleCompletion } from './completions.ts';
import { dashboardRoutes } from './dashboard.ts';
import { History } from './history.ts';
import { createMetrics } from './metrics.ts';
import type { ServerMetrics } from './metrics.ts';
import type { RelayContext } from './relay.ts';
import { residencyRoutes } from './residency-routes.ts';
import { tokenizeRoutes } from './tokenize-routes.ts';
import type { ServerDeps } from './types.ts';

export interface ServerApp {
  readonly app: Hono;
  readonly metrics: ServerMetrics;
  readonly history: History;
}

/** Endpoints named in metrics (anything else counts as 'other', so labels stay bounded). */
const endpoints = new Set(['/', '/health', '/metrics', '/version', '/tokenize', '/detokenize', '/v1/models', '/v1/completions', '/v1/chat/completions', '/v1/residency', '/v1/residency/control', '/v1/residency/stats']);
const endpointOf = (path: string) => (endpoints.has(path) ? path : path.startsWith('/v1/models/') ? '/v1/models/{id}' : 'other');

/** `listenHost`: the address listened on (default loopback); it decides the Host and control rules (access.ts). */
export function createApp(deps: ServerDeps, opts: { defaultMetrics?: boolean; listenHost?: string } = {}): ServerApp {
  const { engine, model, config } = deps;
  const log = deps.log ?? (() => {});
  const metrics = createMetrics(engine, deps.residency, { ...opts, modelName: model.name, ...(deps.hostLane ? { hostLane: deps.hostLane } : {}) });
  const history = new History(metrics, deps.residency);
  const chat = chatFormatter(model.chatTemplate, { bos: model.bosToken, eos: model.eosToken }, model.chatTemplateSource === '--chat-template' ? '--chat-template' : 'checkpoint');
  const ctx: RelayContext = { engine, tokenizer: model.tokenizer, metrics, maxQueue: config.maxQueue, log };
  const app = new Hono();

  // Counted and logged last of all, so refusals by the guards and 404s are in both.
  app.use('*', async (c, next) => {
    const t0 = performance.now();
    await next();
    const status = c.res.status;
    metrics.requests.inc({ endpoint: endpointOf(c.req.path), status: String(status) });
    deps.accessLog?.(`${c.req.method} ${c.req.path.slice(0, 200)} ${status} ${(performance.now() - t0).toFixed(1)}ms`);
  });

  const listenHost = opts.listenHost ?? '127.0.0.1';
  accessGuards(app, config, listenHost);
  // CORS (the guard above already refused other pages): --allowed-origins pages, and on a loopback listener
  // loopback pages too (a local UI on another port), as llama-server limits its CORS to loopback origins.
  const listed = new Set(config.allowedOrigins.map(normalizeOrigin));
  const loopbackPages = isLoopbackHost(listenHost);
  app.use('*', cors({
    origin: (origin) => (listed.has('*') ? '*' : listed.has(normalizeOrigin(origin)) || (loopbackPages && isLoopbackOrigin(origin)) ? origin : null),
    allowMethods: ['GET', 'POST', 'OPTIONS'],
    allowHeaders: ['authorization', 'content-type', 'openai-organization', 'openai-project', 'x-stainless-arch', 'x-stainless-lang', 'x-stainless-os', 'x-stainless-package-version', 'x-stainless-retry-count', 'x-stainless-runtime', 'x-stainless-runtime-version', 'x-stainless-timeout'],
    exposeHeaders: [IGNORED_FIELDS_HEADER],
    maxAge: 600,
  }));

  const card = () => ({ id: model.name, object: 'model', created: 0, owned_by: 'moe-residency', root: model.name, max_model_len: model.maxPositions, chat_template: chat.source });
  app.get('/health', (c) => c.json({ status: 'ok', model: model.name, queue_depth: engine.queueDepth, running: engine.running }));
  app.get('/v1/models', (c) => c.json({ object: 'list', data: [card()] }));
  app.get('/v1/models/:id{.+}', (c) => {
    checkModel(model, c.req.param('id'));
    return c.json(card());
  });
  app.post('/v1/completions', (c) => handleCompletion(c, ctx, model, config));
  app.post('/v1/chat/completions', (c) => handleChat(c, ctx, model, chat, config));
  tokenizeRoutes(app, model, chat, config);
  residencyRoutes(app, deps, history, config);
  app.get('/metrics', async (c) => c.body(await metrics.registry.metrics(), 200, { 'content-type': metrics.registry.contentType }));
  dashboardRoutes(app);

  app.notFound(() => { throw new ApiError(404, 'no such endpoint: see /v1/models, /v1/completions, /v1/chat/completions, /tokenize, /v1/residency, /metrics', { code: 'not_found' }); });
  app.onError((err, c) => errorResponse(c, err));
  return { app, metrics, history };
}
