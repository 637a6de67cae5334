// Starts the app on a port (node's http via @hono/node-server) and stops it cleanly.
import { serve } from '@hono/node-server';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConnectionCaps } from './connections.ts';
import { ResidencyError } from '../errors.ts';
import { createApp } from './app.ts';
import type { ServerApp } from './app.ts';
import type { ServerDeps } from './types.ts';

export interface RunningServer extends ServerApp {
  /** http://host:port, with the port actually bound (0 asks for an ephemeral one). */
  readonly url: string;
  /**
   * Stops accepting connections (idle keep-alive ones are closed too); resolves once every open
   * connection has ended on its own, i.e. its response is done. `close()` ends whatever is left.
   */
  stopAccepting(): Promise<void>;
  /** Closes the connections with no request in progress (keep-alive ones between requests, ones that sent nothing). */
  closeIdleConnections(): void;
  close(): Promise<void>;
}

export async function startServer(deps: ServerDeps, listen: { port: number; host: string }, opts: { defaultMetrics?: boolean } = {}): Promise<RunningServer> {
  const built = createApp(deps, { ...opts, listenHost: listen.host });
  built.history.start(deps.config.sampleSeconds);
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const { headersTimeoutMs, requestTimeoutMs } = deps.config;
    // Node's defaults hold a stalled request for 300 s and check only every 30 s: a slow-body client keeps
    // its connection (and a parser) for minutes. These bound receiving the request, never the response.
    const serverOptions = { headersTimeout: headersTimeoutMs, requestTimeout: requestTimeoutMs, connectionsCheckingInterval: Math.max(50, Math.min(1000, headersTimeoutMs / 2)) };
    const s = serve({ fetch: built.app.fetch, port: listen.port, hostname: listen.host, serverOptions }, () => resolve(s));
    new ConnectionCaps(deps.config.maxConnections, deps.config.maxConnectionsPerClient, headersTimeoutMs).attach(s as unknown as Server);
    s.once('error', (err: NodeJS.ErrnoException) => {
      built.history.stop();
      const why = err.code === 'EADDRINUSE' ? `${listen.host}:${listen.port} is already in use: pick another --port (0 = any free one)` : err.message;
      reject(new ResidencyError('BAD_ARGUMENT', `cannot listen: ${why}`, { cause: err }));
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    ...built,
    url: `http://${host}:${addr.port}`,
    stopAccepting() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeIdleConnections?: () => void }).closeIdleConnections?.();
      });
    },
    closeIdleConnections() {
      (server as { closeIdleConnections?: () => void }).closeIdleConnections?.();
    },
    async close() {
      built.history.stop();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
    },
  };
}
