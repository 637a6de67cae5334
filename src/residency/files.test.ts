// Residency files under a kernel filesystem: a dump_counts path from the control file (the operator's, may
// point anywhere) must fail, not hang: Node 20's recursive mkdirSync never returns under /proc and blocks
// the event loop, so this runs in a child with a kill timer.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { saveCountsDump } from './files.ts';

const dump = { version: 1 as const, model: 'm', step: 0, decode_steps: 0, half_life: 500, decayed: [[1, 2]], cumulative: [[1, 2]] };

function runChild(code: string, killAfterMs = 30_000): Promise<{ code: number | null; killed: boolean; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (s: string) => { stderr += s; });
    let killed = false;
    const timer = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, killAfterMs);
    child.once('exit', (c) => { clearTimeout(timer); resolve({ code: c, killed, stderr }); });
  });
}

describe('residency files', () => {
  it('saveCountsDump makes missing folders and writes a dump that reads back', () => {
    const dir = mkdtempSync(join(tmpdir(), 'files-'));
    try {
      const path = join(dir, 'a', 'b', 'counts.json');
      saveCountsDump(path, dump);
      assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')).cumulative, [[1, 2]]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a dump_counts path under /proc is refused with the path named, not hung', async () => {
    const r = await runChild(`
      import { saveCountsDump } from ${JSON.stringify(new URL('./files.ts', import.meta.url).href)};
      try { saveCountsDump('/proc/x/counts.json', ${JSON.stringify(dump)}); process.exit(0); }
      catch (e) { console.error(e.code + ': ' + e.message); process.exit(3); }`);
    assert.equal(r.killed, false, `hung (killed); stderr: ${r.stderr}`);
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /BAD_ARGUMENT: dump_counts \/proc\/x\/counts\.json/);
    assert.match(r.stderr, /kernel filesystem/);
  });
});
