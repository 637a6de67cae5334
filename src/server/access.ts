// Who may talk to the server: the Host header (DNS rebinding), the Origin header (other web pages), the
// inference API key on /v1/*, and the separate control key on POST /v1/residency/control.
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { Context, Hono, Next } from 'hono';
import { ResidencyError } from '../errors.ts';
import { ApiError } from './api-error.ts';
import type { ServerConfig } from './types.ts';

export const CONTROL_PATH = '/v1/residency/control';
/** What --api-key guards: the API and vLLM's tokenizer endpoints. */
const KEYED_PATHS = ['/v1/*', '/tokenize', '/detokenize'];

/** localhost, *.localhost, 127.0.0.0/8, ::1 (and its v4-mapped form); brackets around IPv6 allowed. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h);
  return false;
}

/** "host[:port]" of a Host header or an origin, lowercased; null when it does not parse. */
function authorityOf(hostHeader: string): { host: string; authority: string } | null {
  try {
    const u = new URL(`http://${hostHeader}`);
    if (u.pathname !== '/' || u.username || u.search) return null;
    return { host: u.hostname, authority: u.host };
  } catch {
    return null;
  }
}

/** An origin as browsers send it: scheme://host[:port], lowercased, no trailing slash. */
export function normalizeOrigin(origin: string): string {
  return origin.trim().toLowerCase().replace(/\/+$/, '');
}

/** An http(s) page served from a loopback name (http://localhost:3000, http://127.0.0.1:5173). */
export function isLoopbackOrigin(origin: string): boolean {
  try {
    const u = new URL(normalizeOrigin(origin));
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === normalizeOrigin(origin) && isLoopbackHost(u.hostname);
  } catch {
    return false;
  }
}

/** An --allowed-origins entry: '*' or scheme://host[:port] with nothing after it. */
function checkOrigin(entry: string): string {
  const o = normalizeOrigin(entry);
  if (o === '*') return o;
  let ok = false;
  try {
    const u = new URL(o);
    ok = (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === o;
  } catch { /* refused below */ }
  if (!ok) throw new ResidencyError('BAD_ARGUMENT', `--allowed-origins '${entry}': expected '*' or an origin such as https://ops.example.com:8443 (scheme, host, optional port, no path)`);
  return o;
}

/** An --allowed-hosts entry: '*' or a host name or address as a Host header carries it, without the port. */
function checkHost(entry: string): string {
  const h = entry.trim().toLowerCase();
  if (h === '*') return h;
  const parsed = authorityOf(h);
  // As written, with no port: the URL parser's host then equals the entry.
  if (parsed === null || parsed.authority !== h || parsed.host !== h) {
    throw new ResidencyError('BAD_ARGUMENT', `--allowed-hosts '${entry}': expected '*' or a host name such as ops.example.com or 10.0.0.7 (no scheme, port or path)`);
  }
  return parsed.host;
}

/** What an operator should hear at start: an exposed listener without a key. */
export function accessWarnings(listenHost: string, config: Pick<ServerConfig, 'apiKey' | 'controlApiKey'>): string[] {
  if (isLoopbackHost(listenHost)) return [];
  const out: string[] = [];
  if (!config.apiKey) out.push(`warning: listening on ${listenHost} (not loopback) without --api-key: anyone who can reach this address can run generations`);
  if (!config.controlApiKey) out.push(`residency control over HTTP is off on ${listenHost}: give --control-api-key to turn it on (the control file still works)`);
  return out;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

function bearerMatches(c: Context, want: Buffer): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(c.req.header('authorization') ?? '');
  return m !== null && timingSafeEqual(digest(m[1]!.trim()), want);
}

const forbidden = (message: string, code: string) => new ApiError(403, message, { type: 'permission_error', code });

/**
 * Installs the guards, in this order: Host, Origin, then the keys.
 * - Host: on a loopback listener, only loopback names (and --allowed-hosts) are answered, so a rebound DNS
 *   name (evil.example -> 127.0.0.1) reaches nothing, whatever --allowed-origins says (CORS is about which
 *   pages may read replies, not which names reach the server). A non-loopback listener is reachable by any
 *   name and relies on the keys.
 * - Origin: a browser names the page that sent a request; requests without one (curl, SDKs) pass. A page
 *   is allowed when it is this server itself (same authority as Host), on a loopback host, or listed in
 *   --allowed-origins ('*' allows any).
 * - Keys: --api-key guards /v1/*; control takes --control-api-key when one is set (and then only it), and
 *   without one control over HTTP is off unless the listener is loopback.
 */
export function accessGuards(app: Hono, config: ServerConfig, listenHost: string): void {
  const loopbackListener = isLoopbackHost(listenHost);
  const origins = new Set(config.allowedOrigins.map(checkOrigin));
  const anyOrigin = origins.has('*');
  const hosts = new Set((config.allowedHosts ?? []).map(checkHost));
  const anyHost = hosts.has('*');

  app.use('*', async (c: Context, next: Next) => {
    const hostHeader = c.req.header('host');
    const host = hostHeader === undefined ? null : authorityOf(hostHeader);
    if (hostHeader !== undefined && host === null) throw forbidden(`Host header '${hostHeader.slice(0, 100)}' is not a host name`, 'host_not_allowed');
    if (loopbackListener && host && !anyHost && !isLoopbackHost(host.host) && !hosts.has(host.host)) {
      throw forbidden(`Host '${host.authority}' is not served: this server listens on loopback and answers only loopback names ` +
        `(add '${host.host}' to --allowed-hosts to put it behind a proxy)`, 'host_not_allowed');
    }
    const origin = c.req.header('origin');
    if (origin !== undefined && !anyOrigin) {
      const o = normalizeOrigin(origin);
      let allowed = origins.has(o);
      if (!allowed && o !== 'null') {
        try {
          const u = new URL(o);
          allowed = (host !== null && u.host === host.authority) || isLoopbackHost(u.hostname);
        } catch { /* not an origin: refused below */ }
      }
      if (!allowed) {
        throw forbidden(`requests from the web page origin '${origin.slice(0, 100)}' are refused: add it to --allowed-origins to allow it`, 'origin_not_allowed');
      }
    }
    await next();
  });

  const control = config.controlApiKey ? digest(config.controlApiKey) : null;
  app.use(CONTROL_PATH, async (c, next) => {
    if (control) {
      if (!bearerMatches(c, control)) {
        throw new ApiError(401, 'residency control needs the control key: send `Authorization: Bearer <--control-api-key>`', { type: 'authentication_error', code: 'invalid_control_key' });
      }
    } else if (!loopbackListener) {
      throw forbidden(`residency control over HTTP is off: the server listens on ${listenHost} (not loopback) without --control-api-key`, 'control_disabled');
    }
    await next();
  });

  if (config.apiKey) {
    const want = digest(config.apiKey);
    const guard = async (c: Context, next: Next) => {
      // A CORS preflight carries no credentials (the browser sends them with the real request).
      if (c.req.method === 'OPTIONS') return next();
      // Control with its own key was checked above; the inference key does not open it, nor is it needed.
      if (!(control && c.req.path === CONTROL_PATH) && !bearerMatches(c, want)) {
        throw new ApiError(401, 'missing or wrong API key: send `Authorization: Bearer <key>`', { type: 'authentication_error', code: 'invalid_api_key' });
      }
      await next();
    };
    for (const path of KEYED_PATHS) app.use(path, guard);
  }
}
