// The dashboard's static files (src/server/dashboard/), read once at start: no build step.
import { readFileSync } from 'node:fs';
import type { Hono } from 'hono';

const files: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
};

export function dashboardRoutes(app: Hono): void {
  const loaded = new Map<string, string>();
  for (const name of Object.keys(files)) loaded.set(name, readFileSync(new URL(`./dashboard/${name}`, import.meta.url), 'utf8'));
  const send = (name: string) => (c: { body: (b: string, s: 200, h: Record<string, string>) => Response }) =>
    c.body(loaded.get(name)!, 200, { 'content-type': files[name]!, 'cache-control': 'no-cache' });
  app.get('/', send('index.html'));
  app.get('/dashboard/dashboard.js', send('dashboard.js'));
  app.get('/dashboard/dashboard.css', send('dashboard.css'));
}
