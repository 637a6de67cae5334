// The folder guard in-process: only checkFolderPath (which creates nothing) meets kernel paths here; the
// refusals through the CLI, where a regression would hang, run as child processes in src/cli/folder-flags.test.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { checkFolderPath, makeFolder } from './folders.ts';

const refusal = (flag: string, path: string) => (e: Error & { code?: string }) =>
  e.code === 'BAD_ARGUMENT' && e.message.startsWith(`${flag} ${path}: `) && /kernel filesystem/.test(e.message);

describe('checkFolderPath', () => {
  for (const p of ['/proc', '/proc/x', '/proc/self/x/y', '/sys/x', '/dev/x', '/dev/x/y']) {
    it(`refuses ${p}, naming the flag`, () => assert.throws(() => checkFolderPath(p, '--residency-dir'), refusal('--residency-dir', p)));
  }

  it('refuses a link into /proc', () => {
    const dir = mkdtempSync(join(tmpdir(), 'folders-test-'));
    try {
      symlinkSync('/proc', join(dir, 'link'));
      const p = join(dir, 'link', 'x');
      assert.throws(() => checkFolderPath(p, '--out'), (e: Error) => refusal('--out', p)(e) && e.message.includes('(/proc/x)'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('accepts ordinary folders, /dev/shm, /process-like names and relative paths, and returns them absolute', () => {
    assert.equal(checkFolderPath(join(tmpdir(), 'a', 'b'), '--out'), join(tmpdir(), 'a', 'b'));
    assert.equal(checkFolderPath('/dev/shm/residency', '--out'), '/dev/shm/residency');
    assert.equal(checkFolderPath('/processes/x', '--out'), '/processes/x');
    assert.equal(checkFolderPath('out/x', '--out'), join(process.cwd(), 'out/x'));
  });

  it('refuses an empty path', () => assert.throws(() => checkFolderPath(' ', '--out'), /--out: expected a folder path/));
});

describe('makeFolder', () => {
  it('makes missing parents one level at a time, and is a no-op on an existing folder', () => {
    const dir = mkdtempSync(join(tmpdir(), 'folders-test-'));
    try {
      const p = join(dir, 'a', 'b', 'c');
      assert.equal(makeFolder(p, '--out'), p);
      assert.ok(statSync(p).isDirectory());
      assert.equal(makeFolder(p, '--out'), p);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reports a file in the way with the flag and the folder it could not make', () => {
    const dir = mkdtempSync(join(tmpdir(), 'folders-test-'));
    try {
      writeFileSync(join(dir, 'file'), 'x');
      assert.throws(() => makeFolder(join(dir, 'file', 'sub'), '--out'), (e: Error & { code?: string }) =>
        e.code === 'BAD_ARGUMENT' && e.message.includes(`cannot make folder ${join(dir, 'file', 'sub')}`));
      assert.throws(() => makeFolder(join(dir, 'file'), '--out'), /exists and is not a folder/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
