// The residency folder on a file system that fills up or is read-only (issue 46 items 2 and 8), with the real
// engine on the tiny model: drops reach /metrics, the server keeps serving, and a read-only folder is refused
// at start whether or not it exists. Needs root (mount -t tmpfs); the read-only case runs without it too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startServing } from '../../src/server/boot.ts';
import { post } from './helpers.ts';

const MODEL = resolve(process.cwd(), 'models/tiny-moe');
const isRoot = process.getuid?.() === 0;

function mountTmpfs(dir: string, options: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const metric = (text: string, name: string, labels = '') => Number(new RegExp(`^${name}\\{${labels}[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

test('a full disk under the residency folder: the server keeps serving, and /metrics counts the dropped lines', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'rd-full-'));
  if (!isRoot || !mountTmpfs(root, 'size=128k')) { rmSync(root, { recursive: true, force: true }); return t.skip('needs root to mount a tmpfs'); }
  const dir = join(root, 'rd');
  const s = await startServing({ modelDir: MODEL, backend: 'cpu', hot: 49, adapt: true, residencyDir: dir, port: 0, host: '127.0.0.1', log: () => {}, budgets: { drain_every: 2 } });
  try {
    const fd = openSync(join(root, 'filler'), 'a');
    for (const chunk of [Buffer.alloc(4096), Buffer.alloc(1)]) for (;;) { try { writeSync(fd, chunk); } catch { break; } }
    closeSync(fd);
    for (let i = 0; i < 6; i++) {
      const r = await post(`${s.server.url}/v1/completions`, { prompt: `The ls command ${i}`, max_tokens: 64, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 200, 'serving goes on');
      await r.text();
    }
    const text = await (await fetch(`${s.server.url}/metrics`)).text();
    assert.ok(metric(text, 'residency_telemetry_lines_dropped_total', 'file="telemetry.jsonl"') > 0, text.split('\n').filter((l) => /dropped|map_writes/.test(l)).join('\n'));
    assert.match(text, /^residency_map_writes_failed_total\{[^}]*\} \d+$/m);
  } finally {
    await s.close();
    try { execFileSync('umount', [root]); } catch { execFileSync('umount', ['-l', root]); }
    rmSync(root, { recursive: true, force: true });
  }
});

test('a read-only residency folder is refused at start, existing or not (it served with telemetry silently dropped)', async () => {
  const root = mkdtempSync(join(tmpdir(), 'rd-ro-'));
  let mounted = false;
  try {
    const ro = join(root, 'ro');
    mkdirSync(ro);
    if (isRoot) {
      // Root writes through permissions: a read-only file system is what stops it.
      mounted = mountTmpfs(ro, 'size=64k');
      if (!mounted) return;
      mkdirSync(join(ro, 'existing'));
      execFileSync('mount', ['-o', 'remount,ro', ro]);
    } else {
      mkdirSync(join(ro, 'existing'));
      chmodSync(join(ro, 'existing'), 0o555);
      chmodSync(ro, 0o555);
    }
    for (const dir of [join(ro, 'existing'), join(ro, 'missing')]) {
      await assert.rejects(
        startServing({ modelDir: MODEL, backend: 'cpu', hot: 49, residencyDir: dir, port: 0, host: '127.0.0.1', log: () => {} }),
        (e: Error) => /residency folder .*cannot (write|make)/.test(e.message),
        dir,
      );
    }
  } finally {
    if (mounted) try { execFileSync('umount', [join(root, 'ro')]); } catch { execFileSync('umount', ['-l', join(root, 'ro')]); }
    if (!isRoot) { chmodSync(join(root, 'ro'), 0o755); chmodSync(join(root, 'ro', 'existing'), 0o755); }
    rmSync(root, { recursive: true, force: true });
  }
});
