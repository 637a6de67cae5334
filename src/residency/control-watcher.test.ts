import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlFileWatcher } from './control-watcher.ts';

test('the GO file fires once; a control file is applied when it changes; a bad one is rejected and logged', () => {
  const dir = mkdtempSync(join(tmpdir(), 'control-'));
  const logs: string[] = [];
  const w = new ControlFileWatcher({ controlPath: join(dir, 'control.json'), goPath: join(dir, 'GO'), log: (m) => logs.push(m) });
  assert.deepEqual(w.poll(), []);
  writeFileSync(join(dir, 'GO'), '');
  assert.deepEqual(w.poll().map((e) => 'command' in e && e.command), [{ freeze: false, baseline: true }]);
  assert.deepEqual(w.poll(), [], 'GO fires once');

  writeFileSync(join(dir, 'control.json'), '{"freeze": true}');
  assert.deepEqual(w.poll().map((e) => 'command' in e && e.command), [{ freeze: true }]);
  assert.deepEqual(w.poll(), [], 'unchanged: not applied again');

  writeFileSync(join(dir, 'control.json'), '{"budgets": {"swaps_per_step": -1}}');
  utimesSync(join(dir, 'control.json'), new Date(), new Date(Date.now() + 5000));
  const [e] = w.poll();
  assert.ok(e && 'error' in e && /budgets\.swaps_per_step/.test(e.error));
  assert.match(logs.at(-1)!, /rejected, nothing changed: budgets\.swaps_per_step/);
});

test('a control file that cannot be read is logged too (the driver leaves the logging to the watcher)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'control-'));
  const logs: string[] = [];
  const w = new ControlFileWatcher({ controlPath: join(dir, 'control.json'), log: (m) => logs.push(m) });
  mkdirSync(join(dir, 'control.json')); // statable, not readable as a file
  const [e] = w.poll();
  assert.ok(e && 'error' in e && /cannot read/.test(e.error));
  assert.match(logs.at(-1) ?? '', /control\.json rejected, nothing changed: cannot read/);
});

test('a FIFO at the control path is refused without a blocking open (it hung the server); in a child with a kill timer', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'control-'));
  const path = join(dir, 'control.json');
  execFileSync('mkfifo', [path]);
  // A blocking open of a FIFO with no writer never returns and no timer in the same process can fire.
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', `
    import { ControlFileWatcher } from ${JSON.stringify(new URL('./control-watcher.ts', import.meta.url).href)};
    const logs = [];
    const w = new ControlFileWatcher({ controlPath: ${JSON.stringify(path)}, log: (m) => logs.push(m) });
    const first = w.poll();
    console.log(JSON.stringify({ first, second: w.poll(), logs: logs.length }));`], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s; });
  let killed = false;
  const timer = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, 20_000);
  await new Promise((resolve) => child.once('exit', resolve));
  clearTimeout(timer);
  assert.equal(killed, false, 'poll() hung on the FIFO');
  const r = JSON.parse(out);
  assert.match(r.first[0].error, /not a regular file \(a FIFO\)/);
  assert.deepEqual(r.second, [], 'reported once, not on every poll');
  assert.equal(r.logs, 1);
});

test('a rejected control file\'s bytes reach the log escaped and bounded (NUL and terminal escapes were echoed raw)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'control-'));
  const logs: string[] = [];
  const w = new ControlFileWatcher({ controlPath: join(dir, 'control.json'), log: (m) => logs.push(m) });
  for (const bad of ['\u0000\u0000\u001b[2J' + 'x'.repeat(5000), '{"\\u0000\\u001b[31m": 1}'] /* an unknown key spelled with JSON escapes */) {
    writeFileSync(join(dir, 'control.json'), bad);
    w.poll();
    const line = logs.at(-1)!;
    assert.match(line, /rejected, nothing changed/);
    assert.doesNotMatch(line, /[\u0000-\u001f\u007f]/, JSON.stringify(line.slice(0, 200)));
    assert.ok(line.length < 600, `${line.length} characters`);
  }
  assert.match(logs.at(-1)!, /\\u0000\\u001b\[31m/);
});
