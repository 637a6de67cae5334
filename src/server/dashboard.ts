// The dashboard's static files (src/server/dashboard/), read once at start: no build step.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';

const files: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
};

/** Next to this module when run from source; from a bundle in dist/, the sources' folder in the package. */
function dashboardDir(): string {
  const candidates = [new URL('./dashboard/', import.meta.url), new URL('../src/server/dashboard/', import.meta.url)].map((u) => fileURLToPath(u));
  return candidates.find((d) => existsSync(`${d}index.html`)) ?? candidates[0]!;
}

export function dashboardRoutes(app: Hono): void {
  const dir = dashboardDir();
  const loaded = new Map<string, string>();
  for (const name of Object.keys(files)) loaded.set(name, readFileSync(`${dir}${name}`, 'utf8'));
  const send = (name: string) => (c: { body: (b: string, s: 200, h: Record<string, string>) => Response }) =>
    c.body(loaded.get(name)!, 200, { 'content-type': files[name]!, 'cache-control': 'no-cache' });
  app.get('/', send('index.html'));
  app.get('/dashboard/dashboard.js', send('dashboard.js'));
  app.get('/dashboard/dashboard.css', send('dashboard.css'));
}
