// Flags that make folders refuse kernel-filesystem paths at once. Node 20's recursive mkdirSync never
// returns under /proc, and it blocks the event loop, so these run the CLI as a child with a kill timer:
// a regression fails the test instead of hanging the suite.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';

/** Runs `residency ...args`; resolves with the exit code (null when killed) and stderr. */
function runCli(args: string[], killAfterMs = 30_000): Promise<{ code: number | null; killed: boolean; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/residency.js', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (s: string) => { stderr += s; });
    let killed = false;
    const timer = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, killAfterMs);
    child.once('exit', (code) => { clearTimeout(timer); resolve({ code, killed, stderr }); });
  });
}

async function refused(args: string[], flag: string, path: string): Promise<void> {
  const r = await runCli(args);
  assert.equal(r.killed, false, `residency ${args.join(' ')} hung (killed); stderr: ${r.stderr}`);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /\[BAD_ARGUMENT\]/);
  assert.ok(r.stderr.includes(`${flag} ${path}`), `stderr names the flag and path: ${r.stderr}`);
  assert.match(r.stderr, /kernel filesystem/);
}

describe('folder flags on kernel filesystems are refused, not hung', () => {
  // The shipped model: without the guard this loads, builds the backend and hangs in the telemetry writer.
  it('serve --residency-dir /proc/x', () => refused(['serve', '--hot', '49', '--port', '0', '--residency-dir', '/proc/x'], '--residency-dir', '/proc/x'));
  // --model points nowhere: the refusal comes before the (slow) model load.
  it('generate --residency-dir /proc/x/y', () => refused(['generate', '--model', '/nonexistent-model', '--prompt-ids', '1', '--hot', '49', '--residency-dir', '/proc/x/y'], '--residency-dir', '/proc/x/y'));
  it('compare --out /sys/x', () => refused(['compare', '--out', '/sys/x'], '--out', '/sys/x'));
  it('fit-map --out /proc/x/map.json', () => refused(['fit-map', '--counts', 'no-such-counts.json', '--out', '/proc/x/map.json'], '--out', '/proc/x/map.json'));
});
